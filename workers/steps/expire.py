"""Maintenance, hourly: drop load older than the retention, and the loop's own short-lived
bookkeeping (per-minute request counters, simulated traffic) older than a day."""
from __future__ import annotations

import time
from dataclasses import dataclass

from workers.context import Ctx
from workers.steps.outcome import Outcome


@dataclass(frozen=True)
class ExpireOutcome(Outcome):
    days_dropped: int
    fields_dropped: int


def step(ctx: Ctx, deployment: str) -> ExpireOutcome:
    days = ctx.store.apply_retention(deployment)
    cutoff_min = int(time.time() // 60) - 24 * 60
    dropped = 0
    for key in (f"{ctx.prefix}:arrivals:{deployment}", f"{ctx.prefix}:rounds:{deployment}",
                f"{ctx.prefix}:mix:{deployment}", f"{ctx.prefix}:sim-traffic:{deployment}"):
        old = [k for k in ctx.r.hkeys(key) if int(k.split(b":")[0]) < cutoff_min]
        for i in range(0, len(old), 1000):
            dropped += ctx.r.hdel(key, *old[i:i + 1000])
    return ExpireOutcome(deployment, days, dropped)
