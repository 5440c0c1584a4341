"""Load series for the fleet simulator: arrivals per sub-minute step plus the per-minute frame.

The simulator replays arrivals at the log's own resolution when it is finer than a
minute (10 s counts, or per-request logs counted per second and re-binned to 10 s)
and per minute otherwise.  The per-minute frame (``requests`` column, NaN for a
missing minute) is what the forecaster sees, except for a series coarser than a minute
(5- or 10-minute counts): the fleet replays its bins spread evenly over their minutes,
but the forecaster sees the bins themselves (``forecast_frame``), each only once it has
ended (``warmup.sim.forecasts``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmcast.resolution import valid_resolution, with_resolution

FINEST_STEP_S = 10  # per-second (per-request) logs are re-binned to this


@dataclass(frozen=True)
class LoadLog:
    """Arrivals on a regular grid of ``step_s`` seconds (60 divisible by it), aligned to minutes."""

    start: pd.Timestamp            # first minute (tz-naive UTC)
    step_s: int                    # 10, 20, 30 or 60 ...
    arrivals: np.ndarray           # requests per step, len = minutes * steps_per_minute, NaN -> 0
    minute: pd.Series              # requests per minute (NaN for a minute with no data)
    source: str = ""
    resolution_min: int = 1        # minutes per bin of the series read (5 for 5-minute counts)
    bins: pd.Series | None = None  # the coarse series' own bins (None for a per-minute or finer one)

    @property
    def steps_per_minute(self) -> int:
        return 60 // self.step_s

    @property
    def minutes(self) -> int:
        return len(self.minute)

    def frame(self) -> pd.DataFrame:
        return self.minute.to_frame("requests")

    def forecast_frame(self) -> pd.DataFrame:
        """What the forecaster sees: the minutes, or a coarse series' own bins (marked with their resolution)."""
        if self.bins is None:
            return self.frame()
        return with_resolution(self.bins.to_frame("requests"), self.resolution_min)

    def slice_minutes(self, i0: int, i1: int) -> np.ndarray:
        """Arrivals of minutes [i0, i1) as an array of shape (i1 - i0, steps_per_minute)."""
        k = self.steps_per_minute
        return self.arrivals[i0 * k:i1 * k].reshape(i1 - i0, k)


def from_series(counts: pd.Series, source: str = "") -> LoadLog:
    """Build a LoadLog from a count series at any regular resolution (1 s .. 1 min or coarser)."""
    if len(counts) == 0:
        raise InputError(f"{source or 'load series'}: no data")
    s = counts.astype(float).sort_index()
    s = s[~s.index.duplicated(keep="last")]
    idx = pd.DatetimeIndex(s.index)
    if idx.tz is not None:
        idx = idx.tz_convert("UTC").tz_localize(None)
    s.index = idx
    diffs = np.asarray((idx[1:] - idx[:-1]).total_seconds(), dtype=float) if len(idx) > 1 else np.array([60.0])
    native = float(np.median(diffs)) if len(diffs) else 60.0
    if native < 60:
        step = FINEST_STEP_S if native < FINEST_STEP_S else int(native)
        if 60 % step != 0:
            step = FINEST_STEP_S
    else:
        step = 60
    start = idx[0].floor("min")
    # The last row covers its whole bin: a 10-minute count's last value is ten minutes, not one.
    end = idx[-1].floor("min") + pd.Timedelta(seconds=max(native - 60.0, 0.0)).floor("min")
    grid = pd.date_range(start, end + pd.Timedelta(seconds=60 - step), freq=f"{step}s")
    if native <= 60:
        binned = s.groupby(s.index.floor(f"{step}s")).sum(min_count=1).reindex(grid)
    else:
        # Coarser than a minute: spread each value evenly over its minutes.
        per_min = s / (native / 60.0)
        binned = per_min.reindex(grid, method="ffill", limit=int(native // 60) - 1)
    minute = binned.groupby(binned.index.floor("min")).sum(min_count=1)
    minute.index.name = "time"
    minute.name = "requests"
    arr = np.nan_to_num(binned.to_numpy(float), nan=0.0)
    if (arr < 0).any():
        raise InputError(f"{source or 'load series'}: negative request counts")
    res = valid_resolution(int(native * 1e9)) if native > 60 else 1
    bins = s.asfreq(f"{res}min") if res > 1 else None
    return LoadLog(start=start, step_s=step, arrivals=arr, minute=minute, source=source,
                   resolution_min=res, bins=bins)


def last_ended_bin_rate(log: LoadLog, times: pd.DatetimeIndex) -> Optional[np.ndarray]:
    """Per minute of ``times``: the per-minute rate of the newest bin of a coarse series that has ended by
    that minute's start (NaN before the first); None for a per-minute or finer series."""
    if log.bins is None or log.resolution_min <= 1:
        return None
    ends = log.bins.index + pd.Timedelta(minutes=log.resolution_min)
    k = np.searchsorted(ends.asi8, times.asi8, side="right") - 1   # the newest bin ended at or before t
    rates = log.bins.to_numpy(float) / log.resolution_min
    return np.where(k >= 0, rates[np.clip(k, 0, None)], np.nan)


def load_log(path: str | Path, **reading: str | None) -> LoadLog:
    """Any log warmcast ingests: per-minute or finer count series, or a per-request log.
    ``reading``: how to read it, as ``warmcast ingest`` takes it (fmt, tz, time_col, count_col, ...)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"log file {p} does not exist")
    from warmcast.ingest import load_count_series

    return from_series(load_count_series(p, **reading), source=str(p))
