"""One warmup run (started by the tick or the scrape's urgent warmup as its own task): send the requests to the
instances, stop early when a tick says so, then audit what was sent."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from workers import audit
from workers.actuation import send_live_warmup
from workers.context import Ctx
from workers.steps.outcome import Outcome


@dataclass(frozen=True)
class WarmupRunOutcome(Outcome):
    results: list[dict[str, Any]] = field(default_factory=list)  # one per instance


def step(ctx: Ctx, deployment: str, *, urls: list[str], requests: int, concurrency: int,
         duration_s: float) -> WarmupRunOutcome:
    abort_key = f"{ctx.prefix}:warmup-abort:{deployment}"
    warming = f"{ctx.prefix}:warming:{deployment}"
    ctx.r.sadd(warming, *urls)
    ctx.r.expire(warming, int(duration_s) + 120)
    res: list[dict[str, Any]] = []
    try:
        res = send_live_warmup(urls, requests, concurrency, duration_s, ctx.token(deployment),
                               _recent_tokens(ctx, deployment), should_abort=lambda: bool(ctx.r.exists(abort_key)))
    finally:
        record_done(ctx, deployment, res)  # before leaving ``warming``: arrivals counting relies on it
        ctx.r.srem(warming, *urls)
    audit.warmup_run(ctx, deployment, urls, res)
    return WarmupRunOutcome(deployment, res)


def record_done(ctx: Ctx, dep: str, results: list[dict[str, Any]]) -> None:
    """Add each instance's completed warmup requests to its cumulative count, which arrivals
    counting subtracts.  Completed, not sent: vLLM counts a request in ``request_success_total``
    only when it ends with a finish reason, and one cancelled at the run's deadline or abort (or
    refused) never does, so the running/waiting it added and removed already nets to zero.
    Subtracting sent took one arrival per cancelled request out of the user's traffic.  What
    remains: a request the server finished before it saw the client cancel is counted there but not
    here (one user arrival too many each; under CPU load all 3 of 3 cancelled in the real-server test)."""
    for r in results:
        if r.get("completed"):
            ctx.r.hincrbyfloat(f"{ctx.prefix}:warmup-done:{dep}", str(r["instance"]), float(r["completed"]))


def _recent_tokens(ctx: Ctx, dep: str):
    """The deployment's token distribution over the last hour, or None (the client's default)."""
    try:
        from warmup.actuators.tokens import TokenDistribution

        return TokenDistribution.from_frame(ctx.store.frame(dep, start=pd.Timestamp.now() - pd.Timedelta(hours=1)))
    except Exception:  # noqa: BLE001 - no token columns stored: the client's default distribution
        return None
