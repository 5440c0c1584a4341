"""Per-minute load series in Redis.

Layout (``P`` is the key prefix, ``D`` the deployment):

- ``P:load:D:SIGNAL:YYYYMMDD`` hash, field = minute of day (0..1439), value = float.
  One hash per day keeps range reads to a handful of HGETALLs and lets retention
  drop whole days.
- ``P:load:D:days`` sorted set of stored day numbers (score = days since epoch).
- ``P:deployments`` set of deployment names with stored load.
- ``P:load:D:rev`` hash, field = day number, value = how many writes have touched that day: a
  reader that keeps days it has read (``warmcast.history.HistoryCache``) re-reads only a day whose
  count moved.
- ``P:load:D:log:DAY`` list, the last ``LOG_KEEP`` writes to that day, each ``"LO HI"`` (the
  first and last minute of the day it wrote; pushed in the write's own transaction, beside the
  revision): a reader whose copy of the day is ``k <= LOG_KEEP`` revisions behind reads back only
  those minutes, not the whole day (a live loop's today grew to 1,440 minutes of eight signals
  re-read every minute).
- ``P:load:D:resolution`` minutes per bin, for a series coarser than a minute (absent: 1).
  A 5-minute series keeps one field per bin (its start minute) and reads back in 5-minute
  bins; a write at another resolution than the one stored is refused whole.  The check is made
  under WATCH of this key and the days set, in the write's own transaction: of two first
  writes at different resolutions, one stores and the other is refused.

Writes are idempotent upserts (a minute's value is replaced, never added to) and
go out in one MULTI/EXEC transaction, so a failed ingest leaves what was stored
before exactly as it was, and re-ingesting the same log changes nothing.
A missing minute is absent from its hash and reads back as NaN, never zero.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import redis

from warmcast.config.deployments import check_deployment_name
from warmcast.errors import InputError, NotFoundError
from warmcast.ingest.accumulate import SIGNALS, regular
from warmcast.ingest.window import NS_PER_DAY, NS_PER_MIN, TimeWindow
from warmcast.resolution import with_resolution
from warmcast.text import clip


LOG_KEEP = 64   # writes kept per day in its log (a reader further behind reads the day whole)
_READ_CLAIM = "return {redis.call('GET', KEYS[1]), redis.call('ZCARD', KEYS[2])}"


class LoadStore:
    def __init__(self, client: redis.Redis, prefix: str = "wc", retention_days: int | None = None) -> None:
        self.r = client
        self.prefix = prefix
        self.retention_days = retention_days

    # ------------------------------------------------------------ keys
    def _day_key(self, dep: str, signal: str, day: int) -> str:
        return f"{self.prefix}:load:{dep}:{signal}:{_day_label(day)}"

    def _days_key(self, dep: str) -> str:
        return f"{self.prefix}:load:{dep}:days"

    def _resolution_key(self, dep: str) -> str:
        return f"{self.prefix}:load:{dep}:resolution"

    def _rev_key(self, dep: str) -> str:
        return f"{self.prefix}:load:{dep}:rev"

    def _log_key(self, dep: str, day: int) -> str:
        return f"{self.prefix}:load:{dep}:log:{_day_label(day)}"

    def resolution(self, deployment: str) -> int:
        """Minutes per stored bin (1 unless a coarser count series was ingested)."""
        raw = self.r.get(self._resolution_key(check_deployment_name(deployment)))
        return int(raw) if raw else 1

    def _check_resolution(self, pipe, dep: str, minutes: int) -> None:
        """Refuse ``minutes`` unless it is the deployment's resolution or nothing is stored yet. Read
        through ``pipe`` while it WATCHes both keys, so the claim and the write are one transaction."""
        # one script reads both, so a write landing between two reads cannot mix them
        raw, n_days = pipe.eval(_READ_CLAIM, 2, self._resolution_key(dep), self._days_key(dep))
        stored = int(raw) if raw else 1
        if stored != minutes and n_days:
            raise InputError(f"deployment {dep!r} stores {stored}-minute bins; this series has {minutes}-minute "
                             "bins, and one deployment holds one resolution: ingest it under another "
                             "deployment name (or delete this one first); nothing was stored")

    # ------------------------------------------------------------ writes
    def window(self, deployment: str, now_ns: int | None = None) -> TimeWindow:
        """The times this deployment accepts now (see ``warmcast.ingest.window``)."""
        days = self.days(check_deployment_name(deployment))
        window = TimeWindow.around(now_ns, self.retention_days)
        believable = [d for d in days if d * NS_PER_DAY <= window.latest_ns]
        return TimeWindow(window.latest_ns, self.retention_days, believable[-1] if believable else None)

    def upsert_frame(self, deployment: str, frame: pd.DataFrame, now_ns: int | None = None,
                     resolution_min: int = 1, also: Callable[[Any], None] | None = None) -> int:
        """Store every non-NaN value of ``frame`` (index: minutes, columns: signals) atomically.
        Returns the number of minutes (bins) written.  A minute outside :meth:`window`, or a
        ``resolution_min`` other than the deployment's, refuses the whole write and nothing is stored.
        ``also(pipe)`` queues more writes into the same transaction (``warmcast.logparts``' carry)."""
        dep = check_deployment_name(deployment)
        frame = _validate_frame(frame)
        if frame.empty:
            if also is not None:
                pipe = self.r.pipeline(transaction=True)
                also(pipe)
                pipe.execute()
            return 0
        minutes = frame.index.as_unit("ns").asi8 // NS_PER_MIN
        self.window(dep, now_ns).check_minutes(minutes[np.isfinite(frame.to_numpy(float)).any(axis=1)])

        def write(pipe) -> None:  # rerun by redis-py whenever a watched key changed before EXEC
            self._check_resolution(pipe, dep, resolution_min)
            pipe.multi()
            self._queue_frame(pipe, dep, frame, minutes, resolution_min)
            if also is not None:
                also(pipe)

        self.r.transaction(write, self._resolution_key(dep), self._days_key(dep))
        self.apply_retention(dep)
        return int(len(frame))

    def _queue_frame(self, pipe, dep: str, frame: pd.DataFrame, minutes: np.ndarray, resolution_min: int) -> None:
        days = minutes // 1440
        for signal in (c for c in SIGNALS if c in frame.columns):
            self._queue_signal(pipe, dep, signal, frame[signal].to_numpy(float), minutes, days)
        pipe.zadd(self._days_key(dep), {str(int(d)): int(d) for d in np.unique(days)})
        for d in np.unique(days):
            pipe.hincrby(self._rev_key(dep), str(int(d)), 1)
            of_day = minutes[days == d] - d * 1440
            pipe.rpush(self._log_key(dep, int(d)), f"{int(of_day.min())} {int(of_day.max())}")
            pipe.ltrim(self._log_key(dep, int(d)), -LOG_KEEP, -1)
        pipe.sadd(f"{self.prefix}:deployments", dep)
        if resolution_min != 1:
            pipe.set(self._resolution_key(dep), int(resolution_min))
        else:  # a deployment whose coarse days retention dropped may start again per minute
            pipe.delete(self._resolution_key(dep))

    def _queue_signal(self, pipe, dep: str, signal: str, values: np.ndarray,
                      minutes: np.ndarray, days: np.ndarray) -> None:
        ok = np.isfinite(values)
        for day in np.unique(days[ok]):
            sel = ok & (days == day)
            mapping = {int(m): _fmt(v) for m, v in zip(minutes[sel] - day * 1440, values[sel])}
            pipe.hset(self._day_key(dep, signal, int(day)), mapping=mapping)

    def apply_retention(self, deployment: str) -> int:
        """Drop days older than retention_days before the newest believable stored day (a day
        later than now + 1 day, stored before writes were bounded, is not counted from);
        returns days dropped."""
        if not self.retention_days:
            return 0
        newest = self.window(deployment).stored_newest_day
        if newest is None:
            return 0
        old = [d for d in self.days(deployment) if d <= newest - self.retention_days]
        if old:
            keys = [self._day_key(deployment, s, d) for d in old for s in SIGNALS]
            keys += [self._log_key(deployment, d) for d in old]
            pipe = self.r.pipeline(transaction=True)
            pipe.delete(*keys)
            pipe.zrem(self._days_key(deployment), *[str(d) for d in old])
            pipe.hdel(self._rev_key(deployment), *[str(d) for d in old])
            pipe.execute()
        return len(old)

    def delete(self, deployment: str) -> None:
        days = self.days(deployment)
        keys = [self._day_key(deployment, s, d) for d in days for s in SIGNALS]
        keys += [self._log_key(deployment, d) for d in days]
        pipe = self.r.pipeline(transaction=True)
        if keys:
            pipe.delete(*keys)
        pipe.delete(self._days_key(deployment), self._resolution_key(deployment), self._rev_key(deployment))
        pipe.srem(f"{self.prefix}:deployments", deployment)
        pipe.execute()

    # ------------------------------------------------------------ reads
    def deployments(self) -> list[str]:
        return sorted(m.decode() if isinstance(m, bytes) else m for m in self.r.smembers(f"{self.prefix}:deployments"))

    def days(self, deployment: str) -> list[int]:
        return [int(float(d)) for d in self.r.zrangebyscore(self._days_key(deployment), "-inf", "+inf")]

    def frame(self, deployment: str, start: pd.Timestamp | str | None = None,
              end: pd.Timestamp | str | None = None, signals: tuple[str, ...] = SIGNALS) -> pd.DataFrame:
        """Bins in [start, end) as a regular frame at the deployment's resolution (per minute unless
        stored coarser; ``attrs['resolution_min']`` says so); NaN where nothing is stored."""
        dep = check_deployment_name(deployment)
        lo = None if start is None else pd.Timestamp(start).value // NS_PER_MIN
        hi = None if end is None else pd.Timestamp(end).value // NS_PER_MIN
        days = self.r.zrangebyscore(self._days_key(dep), "-inf" if lo is None else lo // 1440,
                                    "+inf" if hi is None else hi // 1440)
        days = [int(float(d)) for d in days]
        if not days:
            if dep not in self.deployments():
                raise NotFoundError(f"no load stored for deployment {dep!r}; ingest a log first "
                                    f"(stored: {self.deployments()})")
            return with_resolution(_empty_frame(signals), self.resolution(dep))
        return window_of(days_frame(days, self.read_days(dep, days, signals), signals), lo, hi, self.resolution(dep))

    def read_days(self, dep: str, days: list[int], signals: tuple[str, ...]) -> dict[int, dict[str, np.ndarray]]:
        """Each day's stored values per signal (1440 minutes, NaN where none), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for d in days:
            for s in signals:
                pipe.hgetall(self._day_key(dep, s, d))
        replies = iter(pipe.execute())
        out = {}
        for d in days:
            out[d] = {}
            for s in signals:
                h, v = next(replies), np.full(1440, np.nan)
                if h:
                    idx = np.fromiter((int(k) for k in h.keys()), np.int64, len(h))
                    v[idx] = np.fromiter((float(x) for x in h.values()), float, len(h))
                out[d][s] = v
        return out

    def read_minutes(self, dep: str, day: int, lo: int, hi: int,
                     signals: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The stored values of minutes ``lo..hi`` of ``day`` per signal, in one round trip:
        signal -> (minutes of the day that hold a value, their values)."""
        fields = list(range(lo, hi + 1))
        pipe = self.r.pipeline(transaction=False)
        for s in signals:
            pipe.hmget(self._day_key(dep, s, day), fields)
        out = {}
        for s, got in zip(signals, pipe.execute()):
            have = [i for i, v in enumerate(got) if v is not None]
            out[s] = (np.asarray([fields[i] for i in have], np.int64), np.asarray([float(got[i]) for i in have]))
        return out

    def series(self, deployment: str, signal: str = "requests", start=None, end=None) -> pd.Series:
        frame = self.frame(deployment, start, end, signals=(signal,))
        return frame[signal] if signal in frame else pd.Series(dtype=float, name=signal)

    # ------------------------------------------------------------ export / import
    def export(self, deployment: str, path: str | Path) -> int:
        """Write the stored minutes to Parquet or CSV (by suffix); returns rows written."""
        frame = self.frame(deployment).dropna(how="all")
        out = frame.reset_index()
        out["time"] = out["time"].dt.strftime("%Y-%m-%d %H:%M:%S")
        p = Path(path)
        if p.suffix.lower() in (".parquet", ".pq"):
            out.to_parquet(p, index=False)
        elif p.suffix.lower() == ".csv":
            out.to_csv(p, index=False)
        else:
            raise InputError(f"{p}: export format comes from the suffix: use .parquet or .csv")
        return len(out)


def days_frame(days: list[int], data: dict[int, dict[str, np.ndarray]], signals: tuple[str, ...]) -> pd.DataFrame:
    """The days' minutes as one frame (a signal with nothing stored in any of them left out)."""
    base = np.array(days, np.int64)[:, None] * 1440 + np.arange(1440)
    index = pd.DatetimeIndex((base.ravel() * NS_PER_MIN).astype("datetime64[ns]"), name="time")
    frame = pd.DataFrame({s: np.concatenate([data[d][s] for d in days]) for s in signals}, index=index)
    return frame.dropna(axis=1, how="all") if len(frame.columns) > 1 else frame


def window_of(frame: pd.DataFrame, lo: int | None, hi: int | None, res: int) -> pd.DataFrame:
    """The bins of minutes [lo, hi) as a regular frame at resolution ``res`` (what ``frame`` returns)."""
    mins = frame.index.as_unit("ns").asi8 // NS_PER_MIN
    keep = np.ones(len(frame), bool)
    if lo is not None:
        keep &= mins >= lo
    if hi is not None:
        keep &= mins < hi
    return with_resolution(regular(frame[keep].dropna(how="all"), res), res)


def _fmt(v: float) -> str:
    return repr(float(v)) if v != int(v) else str(int(v))


def _day_label(day: int) -> str:
    return (pd.Timestamp(0) + pd.Timedelta(days=day)).strftime("%Y%m%d")


def _empty_frame(signals: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({s: pd.Series(dtype=float) for s in signals}, index=pd.DatetimeIndex([], name="time"))


def _validate_frame(frame: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(frame.index, pd.DatetimeIndex):
        raise InputError("load frame needs a DatetimeIndex of minutes")
    if frame.index.tz is not None:
        frame = frame.tz_convert("UTC").tz_localize(None)
    unknown = [c for c in frame.columns if c not in SIGNALS]
    if unknown:
        raise InputError(f"unknown signal column(s) {unknown}; known: {list(SIGNALS)}")
    if (frame.index != frame.index.floor("min")).any():
        raise InputError("load frame index must be whole minutes")
    if frame.index.has_duplicates:
        raise InputError("load frame index has duplicate minutes")
    values = frame.to_numpy(float)
    if (values[np.isfinite(values)] < 0).any():
        raise InputError("load frame has negative values")
    return frame


def read_export(path: str | Path) -> pd.DataFrame:
    """Read a file written by :meth:`LoadStore.export` back into a load frame (validated)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    parquet = p.suffix.lower() in (".parquet", ".pq")
    try:
        df = pd.read_parquet(p) if parquet else pd.read_csv(p)
    except (ValueError, OSError, pa.ArrowException) as err:   # a truncated, binary or undecodable file
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        kind = "a Parquet file" if parquet else "a UTF-8 CSV file"
        raise InputError(f"{p}: not {kind} written by 'store export' ({clip(why, 120)})") from None
    if "time" not in df.columns:
        raise InputError(f"{p}: expected a 'time' column and signal columns {list(SIGNALS)}")
    index = pd.to_datetime(df.pop("time"), format="ISO8601", errors="coerce")
    if index.isna().any():
        line = int(np.flatnonzero(index.isna())[0]) + 2
        raise InputError(f"{p}:{line}: column 'time': not a timestamp")
    df.index = pd.DatetimeIndex(index, name="time")
    bad = df.apply(pd.to_numeric, errors="coerce").isna() & df.notna()
    if bad.to_numpy().any():
        row, col = np.argwhere(bad.to_numpy())[0]
        raise InputError(f"{p}:{row + 2}: column {df.columns[col]!r}: not a number")
    return _validate_frame(df.astype(float))
