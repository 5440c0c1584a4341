"""Step 5: advance the profile-switch state machine one step (schedule, context mix or a manual
request): signals and forecast in, the core's ``decide_switch``, the switch applied to the fleet,
then the audit entry with the machine's events."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, time as dtime, timedelta, timezone
from typing import Any

from warmcast.errors import NotFoundError
from warmup.core import ScheduleWindow, decide_switch
from warmup.core.engine import switch_need
from warmup.core.mix_trigger import MixAsk, MixTriggerConfig, decide_mix
from workers import apply, audit, lead, policy
from workers.context import Ctx
from workers.steps import forecast, signals
from workers.steps.outcome import Outcome


MIX_HISTORY_MIN = 6 * 60  # the last sustained run of the mix is looked for this far back


@dataclass(frozen=True)
class SwitchOutcome(Outcome):
    action: str
    reason: str
    phase: str | None = None
    applied: bool | None = None  # None: the machine did not move, so nothing was recorded
    outcome: str | None = None


def step(ctx: Ctx, deployment: str) -> SwitchOutcome:
    """Advance the profile-switch state machine one step."""
    cfg, _ = _with_prewarm_lead(ctx, deployment)
    sig = signals.latest(ctx, deployment)
    _, fc = forecast.stored(ctx, deployment)
    insts = signals.instances_of(sig)
    ready = _ready_by_profile(ctx, deployment)
    replicas = len(insts) or (apply.current_or_none(ctx.scaler(deployment)) or 0)
    now = datetime.now(timezone.utc)
    with policy.locked(ctx, deployment):
        ps, pdoc = policy.load(ctx.state, deployment)
        cfg, pdoc = _with_manual_request(ctx, deployment, cfg, pdoc)
        if not cfg.switch.enabled:
            return SwitchOutcome(deployment, "none", "profile switching is off (no schedule windows)")
        p99 = None if sig.get("p99_s") is None else signals.value(sig, "p99_s")
        mix = None if pdoc.get("manual_profile") else live_mix(ctx, deployment, now)  # a manual request wins
        dec, sstate, events = decide_switch(cfg.switch, now, insts, p99, fc, ps.switch, replicas,
                                            ps.switch.active_profile or cfg.switch.default_profile, mix=mix,
                                            ready=ready, need_rpm=_plan_need(ctx, deployment, cfg, ps))
        ctx.state.put("policy", deployment, policy.document(replace(ps, switch=sstate), pdoc))
    blocked = policy.why_not_applied(ctx, deployment)
    applied, outcome = False, None
    moved = dec.action.value != "none" or events or sstate.phase != ps.switch.phase
    if moved or dec.replicas:  # a split is applied every tick: old replicas go as targets become ready
        applied, outcome = (False, blocked) if blocked else apply.switch(ctx, deployment, dec)
    if moved or (outcome and not outcome.startswith("no change")):
        audit.switch(ctx, deployment, dec, events, sig, blocked is None, applied, outcome)
    return SwitchOutcome(deployment, dec.action.value, str(dec.reason), dec.phase.value,
                         None if outcome is None else applied, outcome)


def live_mix(ctx: Ctx, dep: str, now: datetime) -> MixAsk | None:
    """What the stored live context mix asks for (``schedule.mix_trigger``), or None when not configured."""
    spec = ctx.dep(dep).schedule.mix_trigger
    if spec is None:
        return None
    cfg = MixTriggerConfig(spec.profile, spec.long_tokens, spec.share, spec.sustain_min)
    start = now - timedelta(minutes=MIX_HISTORY_MIN)
    try:
        s = ctx.store.series(dep, "long_share", start=start.replace(tzinfo=None), end=now.replace(tzinfo=None))
    except NotFoundError:  # nothing stored for the deployment yet
        return decide_mix(cfg, [], now)
    points = [(t.to_pydatetime().replace(tzinfo=timezone.utc), float(v)) for t, v in s.items()]
    return decide_mix(cfg, points, now)


def _with_prewarm_lead(ctx: Ctx, dep: str) -> tuple[Any, str]:
    """The core config with the pre-warm lead set to the measured cold start (``workers.lead``),
    unless the operator set ``switch.prewarm_min`` in the policy config."""
    cfg, used = lead.with_lead(ctx, dep, ctx.cfg(dep))
    overrides = (ctx.state.get("policy-config", dep) or {}).get("switch", {})
    if "prewarm_min" in overrides:
        return cfg, "policy-config switch.prewarm_min"
    src = f"{used.source}: {used.detail}"
    return replace(cfg, switch=replace(cfg.switch, prewarm_min=used.cold_start_min, lead_source=src)), src


def _plan_need(ctx: Ctx, dep: str, cfg: Any, ps: Any) -> float | None:
    """The planner's need now (req/min) from its latest journaled decision, made within the last
    5 minutes (it keeps deciding, held, while a switch runs); None: the switch keeps its own."""
    journal = ctx.state.get("plan-journal", dep)
    if not journal or time.time() - float(journal.get("decided_at", 0)) > 300:
        return None
    cap = (journal.get("inputs") or {}).get("capacity_rpm")
    raw = (journal.get("decision") or {}).get("raw")
    if cap is None or raw is None:
        return None
    return switch_need(cfg, max([int(raw)] + [r for _, r in ps.history]), float(cap))


def _ready_by_profile(ctx: Ctx, dep: str) -> dict[str, int] | None:
    """Ready replicas per profile as the scaler sees them (Kubernetes ``readyReplicas`` per workload,
    local servers answering /health, the simulated fleet); None: count the scraped instances."""
    inner = ctx.sim(dep) if ctx.simulate else ctx.scaler(dep).inner
    read = getattr(inner, "ready_by_profile", None)
    if read is None:
        return None
    try:
        return read()
    except Exception:  # noqa: BLE001 - an unreadable scaler: fall back to the scraped instances
        return None


def _with_manual_request(ctx: Ctx, dep: str, cfg: Any, pdoc: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(config, policy document) with a pending manual profile request taken in: a manual request
    is an all-day window for that profile, so the same safe state machine runs it."""
    req = ctx.state.take_profile_request(dep)
    if req:
        pdoc = {**pdoc, "manual_profile": req["profile"], "manual_by": req.get("by")}
    manual = pdoc.get("manual_profile")
    if manual:
        cfg = replace(cfg, switch=replace(cfg.switch, enabled=True, trigger="schedule",
                                          windows=(ScheduleWindow(manual, dtime(0), dtime(0)),)))
    return cfg, pdoc
