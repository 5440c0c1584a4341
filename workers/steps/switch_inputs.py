"""The profile switch's inputs for the tick: the pre-warm lead, a manual request, the live context
mix, and ready replicas per profile as the scaler sees them."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, time as dtime, timedelta, timezone
from typing import Any

from warmcast.errors import NotFoundError
from warmup.core import CoreConfig, ScheduleWindow
from warmup.core.lead import Lead
from warmup.core.mix_trigger import MixAsk, MixTriggerConfig, decide_mix
from workers import lead
from workers.context import Ctx

MIX_HISTORY_MIN = 6 * 60  # the last sustained run of the mix is looked for this far back


def live_mix(ctx: Ctx, dep: str, now: datetime) -> MixAsk | None:
    """What the stored live context mix asks for (``schedule.mix_trigger``), or None when not configured."""
    spec = ctx.dep(dep).schedule.mix_trigger
    if spec is None:
        return None
    cfg = MixTriggerConfig(spec.profile, spec.long_tokens, spec.share, spec.sustain_min)
    now = now.astimezone(timezone.utc) if now.tzinfo else now.replace(tzinfo=timezone.utc)
    start = now - timedelta(minutes=MIX_HISTORY_MIN)
    try:
        s = ctx.store.series(dep, "long_share", start=start.replace(tzinfo=None), end=now.replace(tzinfo=None))
    except NotFoundError:  # nothing stored for the deployment yet
        return decide_mix(cfg, [], now)
    points = [(t.to_pydatetime().replace(tzinfo=timezone.utc), float(v)) for t, v in s.items()]
    return decide_mix(cfg, points, now)


def with_prewarm_lead(ctx: Ctx, dep: str) -> tuple[CoreConfig, Lead]:
    """The core config with the planner's lead (``workers.lead``) and the pre-warm lead set to the
    same measured cold start, unless the operator set ``switch.prewarm_min`` in the policy config."""
    cfg, used = lead.with_lead(ctx, dep, ctx.cfg(dep))
    overrides = (ctx.state.get("policy-config", dep) or {}).get("switch", {})
    if "prewarm_min" in overrides:
        return cfg, used
    src = f"{used.source}: {used.detail}"
    return replace(cfg, switch=replace(cfg.switch, prewarm_min=used.cold_start_min, lead_source=src)), used


def ready_by_profile(ctx: Ctx, dep: str) -> dict[str, int] | None:
    """Ready replicas per profile as the scaler sees them (Kubernetes ``readyReplicas`` per workload,
    local servers answering /health, the simulated fleet); None: count the scraped instances."""
    inner = ctx.sim(dep) if ctx.simulate else ctx.scaler(dep).inner  # read-only: not the apply stage
    read = getattr(inner, "ready_by_profile", None)
    if read is None:
        return None
    try:
        return read()
    except Exception:  # noqa: BLE001 - an unreadable scaler: fall back to the scraped instances
        return None


def with_manual_request(ctx: Ctx, dep: str, cfg: CoreConfig, pdoc: dict[str, Any]) -> tuple[CoreConfig, dict[str, Any]]:
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
