"""Two generated stress traces for the SLO-tuned comparison (issue 27), built from the real Azure 2024
conversation trace (10 s counts) so their minute-to-minute texture is real traffic's:

- ``shift3``: from 08:00 on 2024-05-17 (the test day) the load triples within an hour and stays
  there: the same 10 s bin of the day before and of two days before are added, each thinned by a
  ramp from 0 at 08:00 to 1 at 09:00 (binomial thinning: whole requests).  The tuning's days before
  are untouched, so no policy saw such a level.
- ``spikes4``: a train of 10-minute x4 spikes over the whole trace, one every 2 to 4 hours at
  seeded random times: inside a spike the bins of one, two and three days before are added.  The
  tuning's days have their spikes too, at other times of day.

Fixed seeds: the traces are the same on every run.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SHIFT_START = pd.Timestamp("2024-05-17 08:00")
RAMP = pd.Timedelta(hours=1)


def _series(log) -> pd.Series:
    """The log's counts per step, indexed by the step's start."""
    counts = np.asarray(log.arrivals, dtype=float).reshape(-1)
    return pd.Series(counts, index=pd.date_range(log.start, periods=len(counts), freq=f"{log.step_s}s"))


def _days_before(s: pd.Series, days: int) -> np.ndarray:
    """The counts ``days`` days earlier at each step (0 where the trace has none)."""
    return s.shift(freq=pd.Timedelta(days=days)).reindex(s.index).fillna(0.0).to_numpy()


def shift3(log, seed: int = 0):
    from warmup.sim import from_series

    s = _series(log)
    age = (s.index - SHIFT_START) / RAMP
    ramp = np.clip(np.asarray(age, dtype=float), 0.0, 1.0)
    rng = np.random.default_rng(seed)
    extra = sum(rng.binomial(_days_before(s, d).astype(np.int64), ramp) for d in (1, 2))
    return from_series(s + extra, source=f"{log.source}: x3 from {SHIFT_START} (a 1-h ramp), seed {seed}")


def spike_starts(index: pd.DatetimeIndex, seed: int = 0) -> list[pd.Timestamp]:
    """One start every 2 to 4 hours (uniform), from the trace's fourth day (three days before exist)."""
    rng = np.random.default_rng(seed)
    t, out = index[0] + pd.Timedelta(days=3), []
    while t < index[-1]:
        t += pd.Timedelta(minutes=int(rng.integers(120, 241)))
        out.append(t)
    return out


def spikes4(log, seed: int = 0):
    from warmup.sim import from_series

    s = _series(log)
    inside = np.zeros(len(s), dtype=bool)
    for t in spike_starts(s.index, seed):
        inside |= (s.index >= t) & (s.index < t + pd.Timedelta(minutes=10))
    extra = sum(_days_before(s, d) for d in (1, 2, 3)) * inside
    return from_series(s + extra, source=f"{log.source}: 10-min x4 spikes every 2-4 h, seed {seed}")
