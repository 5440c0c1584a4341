"""A process's rolling copy of the load it reads again and again (issue 44).

The forecast step reads a deployment's last seven days every minute; read from the store each
time, that was 80% of the step (64 hash reads and their parsing for one new minute).  A
:class:`HistoryCache` keeps every day it has read, with the store's revision of that day
(``P:load:D:rev``: how many writes have touched it), and on each read asks the store, in one round
trip, for the days it holds and their revisions: it re-reads only the days whose revision moved (in a
live loop, today's) and the days it has never seen; the newest day it holds, while at most
``LOG_KEEP`` writes behind, only in the minutes those writes touched (the day's write log, read in
the same round trip; today re-read whole was 1,440 minutes of every signal each minute by
evening).  Its answer is exactly :meth:`warmcast.store.LoadStore.frame`'s: a write to any day, an
older one included, moves that day's revision, and a day retention dropped leaves it.  A day read while a write landed keeps the
revision read before it, so it is read again next time.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pandas as pd

from warmcast.config.deployments import check_deployment_name
from warmcast.ingest.accumulate import SIGNALS
from warmcast.ingest.window import NS_PER_MIN
from warmcast.store import LOG_KEEP, LoadStore, days_frame, window_of

# day -> (its revision when read, signal -> 1440 values); a signal with nothing stored that day is not
# kept (most deployments store one or two of the eight: their memory, not eight arrays a day)
Days = dict[int, tuple[int, dict[str, np.ndarray]]]
_NONE = np.full(1440, np.nan)
_NONE.setflags(write=False)


class HistoryCache:
    """Stored days per deployment, re-read only where the store's revision moved (module docstring);
    at most ``max_deployments`` deployments are kept, the least recently read dropped first."""

    def __init__(self, store: LoadStore, max_deployments: int = 2_000) -> None:
        self.store = store
        self.max_deployments = max_deployments
        self._days: OrderedDict[str, Days] = OrderedDict()
        # deployment -> (what its serving window was built from, that window): the forecast step reads
        # it twice a minute (the shard's batched prime, then its own step) and the API again
        self._served: dict[str, tuple[tuple, pd.DataFrame]] = {}
        self.days_read = 0   # days read whole from the store (a test and a bench read it)
        self.minutes_read = 0   # minutes read back from a day's log instead of the whole day
        self._lock = threading.Lock()   # a worker's threads and the API's share one copy

    def frame(self, deployment: str, start: pd.Timestamp | str | None = None) -> pd.DataFrame:
        """:meth:`LoadStore.frame` (every signal, from ``start``), from the days kept where they are current."""
        lo = None if start is None else pd.Timestamp(start).value // NS_PER_MIN
        got = self._refresh(deployment, lambda stored: None if lo is None else lo // 1440)
        if got is None:
            return self.store.frame(deployment, start)   # the store's own answer: empty, or no such deployment
        days, data, res, _ = got
        return window_of(days_frame(days, data, SIGNALS), lo, None, res)

    def serving(self, deployment: str, days_back: float) -> pd.DataFrame | None:
        """``forecaster.live.serving_history``'s window (``days_back`` before the top of the hour the
        newest stored bin ends in, through that bin) in one read; None where that function must say
        why there is none (nothing stored, or nothing in the newest day)."""
        got = self._refresh(deployment, lambda stored: stored[-1] - int(np.ceil(days_back)) - 1)
        if got is None:
            return None
        days, data, res, revisions = got
        key = (tuple(days), revisions, res, days_back)
        memo = self._served.get(deployment)
        if memo is not None and memo[0] == key:   # nothing written since: the same window
            return memo[1].copy()
        newest = data[days[-1]]
        seen = np.flatnonzero(np.any([np.isfinite(v) for v in newest.values()], axis=0))
        if not len(seen):
            return None
        last = (days[-1] * 1440 + int(seen[-1])) * NS_PER_MIN
        origin = pd.Timestamp(last) + pd.Timedelta(minutes=res)
        lo = (origin.floor("h") - pd.Timedelta(days=days_back)).value // NS_PER_MIN
        frame = window_of(days_frame(days, data, SIGNALS), lo, None, res)
        self._served[deployment] = (key, frame)
        return frame.copy()   # a caller may change its copy; the kept one stays as built

    def _refresh(self, deployment: str, first_day) -> tuple[list[int], dict, int, tuple] | None:
        """(the stored days from ``first_day(stored days)`` on, their values, the resolution, the
        revisions kept for them), the days whose revision moved read again in one round trip; None
        when none is stored there."""
        dep = check_deployment_name(deployment)
        with self._lock:
            return self._refresh_held(dep, first_day)

    def _refresh_held(self, dep: str, first_day) -> tuple[list[int], dict, int, tuple] | None:
        st = self.store
        newest = max(self._days.get(dep, {}), default=None)   # in a live loop, the day writes land in
        pipe = st.r.pipeline(transaction=True)   # the revisions and the newest day's log as of one moment
        pipe.zrangebyscore(st._days_key(dep), "-inf", "+inf")
        pipe.hgetall(st._rev_key(dep))
        pipe.get(st._resolution_key(dep))
        if newest is not None:
            pipe.lrange(st._log_key(dep, newest), -LOG_KEEP, -1)
        raw_days, raw_revs, raw_res, *log = pipe.execute()
        stored = [int(float(d)) for d in raw_days]
        lo = first_day(stored) if stored else None
        days = [d for d in stored if lo is None or d >= lo]
        if not days:
            return None
        revs = {int(k): int(v) for k, v in raw_revs.items()}
        kept = self._kept(dep, set(stored))
        stale = [d for d in days if d not in kept or kept[d][0] != revs.get(d, 0)]
        if newest in stale and newest in kept and self._patch(dep, newest, kept, revs.get(newest, 0), log[0]):
            stale.remove(newest)
        if stale:
            fresh = st.read_days(dep, stale, SIGNALS)
            self.days_read += len(stale)
            for d in stale:
                kept[d] = (revs.get(d, 0), {sig: v for sig, v in fresh[d].items() if not np.isnan(v).all()})
        data = {d: {sig: kept[d][1].get(sig, _NONE) for sig in SIGNALS} for d in days}
        return days, data, int(raw_res) if raw_res else 1, tuple(kept[d][0] for d in days)

    def _patch(self, dep: str, day: int, kept: Days, rev: int, log: list[bytes]) -> bool:
        """Bring the kept ``day`` to revision ``rev`` by reading only the minutes its log says the
        writes since the kept revision touched; False (read it whole) where the log does not hold them
        all (more writes than it keeps, or writes from before it existed)."""
        behind = rev - kept[day][0]
        if not 0 < behind <= len(log):
            return False
        spans = [tuple(int(x) for x in e.split()) for e in log[-behind:]]
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        fresh = self.store.read_minutes(dep, day, lo, hi, SIGNALS)
        values = dict(kept[day][1])
        for sig, (at, v) in fresh.items():
            if len(at):
                arr = values[sig].copy() if sig in values else np.full(1440, np.nan)
                arr[at] = v
                values[sig] = arr
        kept[day] = (rev, values)
        self.minutes_read += hi - lo + 1
        return True

    def _kept(self, dep: str, stored: set[int]) -> Days:
        """The deployment's kept days, without those the store no longer holds (retention, a delete)."""
        kept = self._days.pop(dep, {})
        self._days[dep] = kept   # most recently read last
        for d in [d for d in kept if d not in stored]:
            del kept[d]
        while len(self._days) > self.max_deployments:
            gone, _ = self._days.popitem(last=False)
            self._served.pop(gone, None)
        return kept

    def forget(self, deployment: str) -> None:
        self._days.pop(deployment, None)
        self._served.pop(deployment, None)
