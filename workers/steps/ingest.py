"""Maintenance: add the minutes completed since the last ingest to the load store (the simulated
fleet's traffic, or the fleet's request counter that the signals step keeps per minute).  A
deployment whose arrivals come from its gateway's access log (``signals.arrivals: access_log``)
gets them from ``warmcast ingest --follow``; this step writes none for it."""
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
    if not ctx.simulate:  # minutes a held instance may still add to are written again
        held = ctx.r.get(f"{ctx.prefix}:arrivals-held:{deployment}")
        start = min(start, max(int(held), now_min - 60)) if held is not None else start
    if start >= now_min:
        return IngestOutcome(deployment, 0)
    if ctx.simulate:
        frame = _frame({m: {"requests": v} for m, v in ctx.sim(deployment).traffic(start, now_min).items()})
    elif ctx.dep(deployment).signals.arrivals == "access_log":  # `ingest --follow` writes them
        frame = _frame({})
    else:
        frame = _frame(_arrival_minutes(ctx, deployment, start, now_min))
    if not frame.empty:
        ctx.store.upsert_frame(deployment, frame)
    ctx.r.set(mark_key, now_min - 1)
    return IngestOutcome(deployment, len(frame))


def _frame(rows: dict[int, dict[str, float]]) -> pd.DataFrame:
    idx = pd.DatetimeIndex(pd.to_datetime(np.array(sorted(rows), np.int64) * 60, unit="s"), name="time")
    return pd.DataFrame([rows[m] for m in sorted(rows)], index=idx)


def _arrival_minutes(ctx: Ctx, dep: str, start: int, end: int) -> dict[int, dict[str, float]]:
    """Arrivals and coverage of each minute in [start, end) that a signals round read.  A minute
    no round read is absent (missing), never zero; coverage < 1 marks a minute some instance did
    not answer in (its count is the gap's arrivals spread over it: the forecaster skips it)."""
    arrived = {int(k): float(v) for k, v in ctx.r.hgetall(f"{ctx.prefix}:arrivals:{dep}").items()}
    rounds = {k.decode(): int(v) for k, v in ctx.r.hgetall(f"{ctx.prefix}:rounds:{dep}").items()}
    mix = {k.decode(): float(v) for k, v in ctx.r.hgetall(f"{ctx.prefix}:mix:{dep}").items()}
    out = {}
    for m in range(start, end):
        expected = rounds.get(f"{m}:expected")
        if expected is None:
            continue
        coverage = 1.0 if expected == 0 else 1.0 - rounds.get(f"{m}:missed", 0) / expected
        if m in arrived or coverage == 1.0:  # a minute nothing was counted in is not a zero unless all answered
            out[m] = {"requests": arrived.get(m, 0.0), "coverage": coverage}
        else:
            out[m] = {"coverage": coverage}
        if mix.get(f"{m}:total", 0.0) > 0:  # the live context mix: share of prompts longer than the line
            out[m]["long_share"] = min(1.0, mix.get(f"{m}:long", 0.0) / mix[f"{m}:total"])
    return out
