"""Maintenance: add the minutes completed since the last ingest to the load store (the simulated
fleet's traffic, or the fleet's request counter that the signals step keeps per minute)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workers.context import Ctx
from workers.steps.outcome import Outcome


@dataclass(frozen=True)
class IngestOutcome(Outcome):
    minutes: int  # minutes written


def step(ctx: Ctx, deployment: str) -> IngestOutcome:
    now_min = int(time.time() // 60)
    mark_key = f"{ctx.prefix}:ingested:{deployment}"
    last = ctx.r.get(mark_key)
    start = int(last) + 1 if last is not None else now_min - 60
    if start >= now_min:
        return IngestOutcome(deployment, 0)
    if ctx.simulate:
        values = ctx.sim(deployment).traffic(start, now_min)
    else:
        values = _counter_minutes(ctx, deployment, start, now_min)
    if values:
        idx = pd.DatetimeIndex(pd.to_datetime(np.array(sorted(values), np.int64) * 60, unit="s"), name="time")
        ctx.store.upsert_frame(deployment, pd.DataFrame({"requests": [values[m] for m in sorted(values)]}, index=idx))
    ctx.r.set(mark_key, now_min - 1)
    return IngestOutcome(deployment, len(values))


def _counter_minutes(ctx: Ctx, dep: str, start: int, end: int) -> dict[int, float]:
    raw = ctx.r.hgetall(f"{ctx.prefix}:counter:{dep}")
    counts = {int(k): float(v) for k, v in raw.items()}
    out = {}
    for m in range(start, end):
        if m in counts and (m - 1) in counts:
            out[m] = max(0.0, counts[m] - counts[m - 1])  # a reset (restart) reads as 0, not negative
    return out
