"""Warmup between ticks: the scrape's fast path.  The tick decides warmups with everything else
(``workers/steps/tick.py``); a queue over the lowest tier seen by a scrape mid-minute starts the
warmup the next tick would start, with the core's own warmup stage on the tick's stored state, so
a surge is met within a scrape rather than within a minute.  This is the one live-only decision
(docs/ARCHITECTURE.md); ``warmcast replay`` has no mid-minute scrapes and never takes it.
``new_targets`` keeps a warmup episode's instances, so the tick and the fast path send once each."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from warmup.core import WarmupAction, decide_warmup, planning_capacity
from workers import apply, audit, policy
from workers.apply_tick import new_targets
from workers.context import Ctx
from workers.steps import forecast, signals
from workers.steps.outcome import Outcome


@dataclass(frozen=True)
class WarmupOutcome(Outcome):
    action: str
    reason: str
    instances: list[str] = field(default_factory=list)
    applied: bool | None = None  # None: nothing new to start or stop, so nothing was recorded
    outcome: str | None = None


def step(ctx: Ctx, deployment: str, *, signals_doc: dict[str, Any] | None = None,
         now: datetime | None = None) -> WarmupOutcome:
    """Decide warmup from queue depth (and predicted growth); start or stop warmup runs.

    ``signals_doc``: signals just read (the scrape's fast path), else the stored ones; ``now``: the
    clock when a replay drives the loop (a warmup started on the wall clock in a 2024 replay stayed
    active through every replayed minute after it), else the wall's."""
    cfg = ctx.cfg(deployment)
    sig = signals_doc or signals.latest(ctx, deployment)
    _, fc = forecast.stored(ctx, deployment)
    now = datetime.now(timezone.utc) if now is None else now
    with policy.locked(ctx, deployment):
        ps, pdoc = policy.load(ctx.state, deployment)
        policy.note_lost_state(ctx, deployment, pdoc)
        cap = planning_capacity(cfg, ps, ps.switch.active_profile or cfg.switch.default_profile)
        p99 = None if sig.get("p99_s") is None else signals.value(sig, "p99_s")
        wd, wstate = decide_warmup(cfg.warmup, now, signals.instances_of(sig), signals.value(sig, "observed_rpm", 0.0),
                                   signals.value(sig, "queue_depth", 0.0), p99, fc, ps.warmup, cap)
        ctx.state.put("policy", deployment, policy.document(replace(ps, warmup=wstate), pdoc))
        policy.note_stored(ctx, deployment)
    blocked = policy.why_not_applied(ctx, deployment)
    targets = new_targets(ctx, deployment, wd)
    outcome = None
    if wd.action == WarmupAction.STOP or targets:
        outcome = blocked or apply.warmup(ctx, deployment, wd, sig, targets)
    audit.warmup(ctx, deployment, wd, sig, targets, blocked is None, outcome)
    return WarmupOutcome(deployment, wd.action.value, str(wd.reason), list(wd.instances),
                         None if outcome is None else blocked is None, outcome)


def urgent(ctx: Ctx, deployment: str, signals_doc: dict[str, Any]) -> bool:
    """A queue over the lowest tier: the scrape acts on it now, not at the next tick."""
    tiers = ctx.cfg(deployment).warmup.tiers
    return bool(tiers) and (signals_doc.get("queue_depth") or 0) > tiers[0].min_queue_depth
