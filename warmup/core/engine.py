"""One tick of the decision core: TickInput and PolicyState in, decisions and the new state out.

Order: the profile switch first (it fixes the per-replica capacity the scaler
plans with), then pre-scaling, then warmup.  In forecast-only (dry-run) mode the
same decisions are computed and returned with ``applied=False``; callers record
them and change nothing.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from warmup.core.prescale import decide_scale
from warmup.core.switching import IN_SWITCH, WATCHED, decide_switch, sized
from warmup.core.config import CoreConfig
from warmup.core.decisions import TickOutput
from warmup.core.inputs import TickInput, as_utc
from warmup.core.state import PolicyState, SwitchState
from warmup.core.switch_capacity import ready_by_profile
from warmup.core.warmup import decide_warmup


def planning_capacity(cfg: CoreConfig, state: PolicyState, active_profile: str) -> float:
    """Per-replica capacity to plan with: the active profile's, the lower of the two during a switch."""
    base = cfg.scaling.capacity_rpm
    sw = cfg.switch
    if not sw.enabled or not sw.profile_capacity:
        return base
    active = state.switch.active_profile or active_profile or sw.default_profile
    cap = sw.capacity_of(active, base)
    if state.switch.phase in IN_SWITCH and state.switch.target_profile:
        cap = min(cap, sw.capacity_of(state.switch.target_profile, base))
    return cap


def switch_need(cfg: CoreConfig, raw_replicas: int, capacity_rpm: float) -> float:
    """The capacity (req/min) a switch keeps ready: the planner's raw need (forecast or load, before
    stabilisation) inside the replica bounds, at the planning capacity."""
    sc = cfg.scaling
    return float(min(max(raw_replicas, sc.min_replicas), max(sc.max_replicas, sc.min_replicas)) * capacity_rpm)


def decide(cfg: CoreConfig, inp: TickInput, state: PolicyState | None = None) -> TickOutput:
    """The whole decision for one tick.  Pure: same inputs, same output."""
    state = state or PolicyState()
    now = as_utc(inp.now)
    provisioned = len(inp.instances)
    ready = dict(inp.ready_by_profile) if inp.ready_by_profile else None

    before = state.switch
    sw_dec, sw_state, events = decide_switch(cfg.switch, now, inp.instances, breaker_p99(inp, before), inp.forecast,
                                             state.switch, provisioned, inp.active_profile, mix=inp.mix,
                                             ready=ready)
    state = replace(state, switch=sw_state)
    cap = planning_capacity(cfg, state, inp.active_profile)

    scale, state = decide_scale(cfg.scaling, now, inp.instances, inp.observed_rpm, inp.queue_depth,
                                inp.forecast, state, capacity_rpm=cap, errors=inp.recent_errors,
                                error_minutes=inp.error_minutes)
    if sw_dec.replicas:  # a switch sizes each profile from the plan's need now, not the old fleet's
        # the planner's stabilised need: the highest raw recommendation in its window, never the
        # count of instances (those include the switch's own targets)
        need = switch_need(cfg, max([scale.raw] + [r for _, r in state.history]), cap)
        if state.switch.phase in IN_SWITCH:
            state = replace(state, switch=replace(state.switch, need_rpm=need))
        sw_dec = sized(cfg.switch, sw_dec, before, state.switch, need,
                       ready if ready is not None else ready_by_profile(inp.instances, sw_state.active_profile))
    wu, wu_state = decide_warmup(cfg.warmup, now, inp.instances, inp.observed_rpm, inp.queue_depth,
                                 inp.p99_latency_s, inp.forecast, state.warmup, cap)
    state = replace(state, warmup=wu_state)
    return TickOutput(now=now, scale=scale, warmup=wu, switch=sw_dec, events=events, state=state,
                      applied=not cfg.dry_run, mode="dry_run" if cfg.dry_run else "live")


def breaker_p99(inp: TickInput, switch: SwitchState) -> Optional[float]:
    """The P99 the switch's breaker watches: in the canary, the move and the settle the target's own
    instances' P99 where the signals give it per profile, else the fleet's.  A canary's share barely
    moves the fleet's P99 (a target 25% slower on 10% of traffic lifts it by a few percent), so the
    breaker judges the canary as canary analysis does: by its own replicas."""
    own = dict(inp.p99_by_profile).get(switch.target_profile) if switch.phase in WATCHED else None
    return own if own is not None else inp.p99_latency_s
