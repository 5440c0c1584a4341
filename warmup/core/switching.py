"""Profile switching as a state machine.

A profile is a set of vLLM engine arguments with its own capacity (say ``day``:
max-num-seqs 16, block-size 16; ``night``: max-num-seqs 8, block-size 48).  Which
profile is asked for comes from schedule windows in a time zone, or from the
forecast share of long-context requests.

    STEADY --(ask changes within prewarm_min)--> PREWARM      start target instances ahead
    PREWARM --(ask no longer there)-----------> STEADY       cancel
    PREWARM --(ask starts, targets ready)------> CANARY       move canary_share of capacity
    CANARY --(P99 > baseline * (1 + rise))-----> PAUSED       roll back + alert
    CANARY --(ask ends during the hold)--------> STEADY       roll back, no alert
    CANARY --(hold_min passed, P99 fine)-------> STEADY       move all: target becomes active
    PAUSED --(ask no longer the rolled-back)---> STEADY       resume

The morning switch is the same machine with day as the target.  Every
transition is recorded with its reason in ``SwitchState.transitions``.
"""
from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from datetime import time as dtime
from typing import Optional

from warmup.core.config import SwitchConfig
from warmup.core.decisions import Event, SwitchAction, SwitchDecision
from warmup.core.inputs import ForecastInput, Instance, as_utc
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.state import SwitchPhase, SwitchState, Transition

MAX_TRANSITIONS = 200  # kept in the state; older ones are dropped (the caller records them too)


def scheduled_profile(cfg: SwitchConfig, at: datetime) -> tuple[str, str]:
    """(profile, why) asked for by the schedule at instant ``at``."""
    local = as_utc(at).astimezone(cfg.tz or timezone.utc)
    t = dtime(local.hour, local.minute, local.second)  # wall-clock time of day there
    for w in cfg.windows:
        if w.contains(t):
            return w.profile, (f"schedule window {w.profile} {w.start:%H:%M}-{w.end:%H:%M} "
                               f"({local.tzname()}) covers {local:%H:%M}")
    return cfg.default_profile, f"no schedule window covers {local:%H:%M} ({local.tzname()}): default profile"


def mix_profile(cfg: SwitchConfig, fc: Optional[ForecastInput], now: datetime, ahead_min: float,
                fallback: str) -> tuple[str, str]:
    """(profile, why) asked for by the forecast long-context share around ``now + ahead_min``."""
    path = fc.extra_path(cfg.mix_signal) if fc is not None else None
    if not path:
        return fallback, f"no forecast of {cfg.mix_signal}: keep {fallback}"
    offset = max(0, int(math.floor((as_utc(now) - as_utc(fc.origin)).total_seconds() / 60.0 + 1e-9)))
    i = min(len(path) - 1, offset + int(round(ahead_min)))
    seg = [v for v in path[max(offset, i - 9): i + 1] if math.isfinite(v)]
    if not seg:
        return fallback, f"forecast of {cfg.mix_signal} is empty: keep {fallback}"
    share = sum(seg) / len(seg)
    for rule in cfg.mix_rules:
        if share >= rule.min_share:
            return rule.profile, f"forecast long-context share {share:.0%} >= {rule.min_share:.0%}"
    return cfg.default_profile, f"forecast long-context share {share:.0%} is below every rule: default profile"


def asked_profile(cfg: SwitchConfig, fc: Optional[ForecastInput], now: datetime, ahead_min: float,
                  active: str) -> tuple[str, str]:
    if cfg.trigger == "context_mix":
        return mix_profile(cfg, fc, now, ahead_min, active)
    return scheduled_profile(cfg, as_utc(now) + timedelta(minutes=ahead_min))


def _canary_count(cfg: SwitchConfig, replicas: int) -> int:
    return max(1, int(math.ceil(cfg.canary_share * max(replicas, 0) - 1e-9)))


def decide_switch(cfg: SwitchConfig, now: datetime, instances: tuple[Instance, ...], p99_s: Optional[float],
                  forecast: Optional[ForecastInput], state: SwitchState, replicas: int,
                  active_profile: str = "") -> tuple[SwitchDecision, SwitchState, tuple[Event, ...]]:
    now = as_utc(now)
    active = state.active_profile or active_profile or cfg.default_profile
    state = replace(state, active_profile=active)
    p99_ok = p99_s is not None and math.isfinite(p99_s) and p99_s > 0
    trig = ReasonCode.SWITCH_CONTEXT_MIX if cfg.trigger == "context_mix" else ReasonCode.SWITCH_SCHEDULE

    def go(to_phase: SwitchPhase, action: SwitchAction, reason: Reason, *, new_active: Optional[str] = None,
           target: str = "", share: float = 0.0, count: int = 0, baseline: Optional[float] = None,
           blocked: Optional[str] = None, events: tuple[Event, ...] = ()):
        frm_profile = state.active_profile
        to_profile = target or (new_active or state.active_profile)
        tr = Transition(now, state.phase, to_phase, frm_profile, to_profile, reason)
        st = replace(state, phase=to_phase, since=now,
                     active_profile=new_active if new_active is not None else state.active_profile,
                     target_profile=target, baseline_p99_s=baseline,
                     blocked_profile=state.blocked_profile if blocked is None else blocked,
                     transitions=(state.transitions + (tr,))[-MAX_TRANSITIONS:])
        dec = SwitchDecision(action, reason, to_phase, from_profile=frm_profile, to_profile=to_profile,
                             share=share, instances=count)
        return dec, st, events

    def stay(code: ReasonCode, text: str, st: SwitchState = state):
        return SwitchDecision(SwitchAction.NONE, Reason(code, text), st.phase, from_profile=st.active_profile,
                              to_profile=st.target_profile), st, ()

    if not cfg.enabled:
        return stay(ReasonCode.SWITCH_STEADY, f"profile switching disabled; {active} serves")

    ahead, why_ahead = asked_profile(cfg, forecast, now, cfg.prewarm_min, active)
    want, why_now = asked_profile(cfg, forecast, now, 0.0, active)
    since = as_utc(state.since) if state.since is not None else now
    in_phase_min = (now - since).total_seconds() / 60.0

    if state.phase is SwitchPhase.STEADY:
        target = ahead if ahead != active else (want if want != active else "")
        if target:
            n = _canary_count(cfg, replicas)
            why = why_ahead if target == ahead else why_now
            return go(SwitchPhase.PREWARM, SwitchAction.PREWARM,
                      Reason(trig, f"{why}; profile {target} asked for within {cfg.prewarm_min:.0f} min: "
                                   f"pre-warming {n} {target} instance(s)"),
                      target=target, count=n, baseline=p99_s if p99_ok else state.baseline_p99_s)
        return stay(ReasonCode.SWITCH_STEADY, f"{active} serves and stays asked for ({why_ahead})")

    if state.phase is SwitchPhase.PREWARM:
        target = state.target_profile
        baseline = p99_s if p99_ok else state.baseline_p99_s   # the latest pre-switch P99
        st = replace(state, baseline_p99_s=baseline)
        if ahead != target and want != target:
            state = st
            return go(SwitchPhase.STEADY, SwitchAction.CANCEL,
                      Reason(ReasonCode.SWITCH_CANCELLED, f"{target} is no longer asked for ({why_ahead}): "
                                                          "pre-warmed instances are dropped"))
        if want != target:
            return stay(ReasonCode.SWITCH_PREWARMING, f"pre-warming {target}; {why_ahead}", st)
        n = _canary_count(cfg, replicas)
        tagged = [i for i in instances if i.profile]
        ready_targets = sum(1 for i in instances if i.profile == target and i.state.ready)
        waited = in_phase_min - cfg.prewarm_min
        if tagged and ready_targets < n and waited < cfg.max_prewarm_wait_min:
            return stay(ReasonCode.SWITCH_WAIT_READY, f"{target} asked for now but only {ready_targets} of {n} "
                        f"pre-warmed instance(s) are ready", st)
        state = st
        text = (f"{why_now}; moving {cfg.canary_share:.0%} of capacity to {target} and holding "
                f"{cfg.hold_min:.0f} min against the pre-switch P99")
        if baseline is None:
            text += " (no pre-switch P99 known: the hold cannot compare latency)"
        return go(SwitchPhase.CANARY, SwitchAction.MOVE_CANARY,
                  Reason(ReasonCode.SWITCH_CANARY if baseline is not None else ReasonCode.SWITCH_NO_P99, text),
                  target=target, share=cfg.canary_share, count=n, baseline=baseline)

    if state.phase is SwitchPhase.CANARY:
        target = state.target_profile
        base = state.baseline_p99_s
        if p99_ok and base is not None and p99_s > base * (1.0 + cfg.rollback_p99_rise):
            reason = Reason(ReasonCode.SWITCH_ROLLBACK_P99,
                            f"P99 {p99_s:.2f} s is {p99_s / base - 1:.0%} above the pre-switch baseline "
                            f"{base:.2f} s (limit {cfg.rollback_p99_rise:.0%}): switch to {target} paused, "
                            f"rolled back to {active}")
            ev = (Event(now, "alert", reason),)
            dec, st, _ = go(SwitchPhase.PAUSED, SwitchAction.ROLLBACK, reason, target=target,
                            share=cfg.canary_share, baseline=base, blocked=target, events=ev)
            return replace(dec, to_profile=active), st, ev
        if want != target:
            reason = Reason(ReasonCode.SWITCH_CANCELLED, f"{target} no longer asked for during the hold "
                            f"({why_now}): canary moved back to {active}")
            dec, st, ev = go(SwitchPhase.STEADY, SwitchAction.ROLLBACK, reason, share=cfg.canary_share)
            return replace(dec, to_profile=active), st, ev
        if in_phase_min >= cfg.hold_min:
            p = f"P99 {p99_s:.2f} s" if p99_ok else "P99 unknown"
            b = f"{base:.2f} s" if base is not None else "unknown"
            reason = Reason(ReasonCode.SWITCH_COMPLETE, f"held {cfg.hold_min:.0f} min with {p} against baseline "
                            f"{b}: moving all capacity to {target}")
            return go(SwitchPhase.STEADY, SwitchAction.MOVE_ALL, reason, new_active=target, share=1.0,
                      count=replicas, events=(Event(now, "info", reason),))
        p = f"P99 {p99_s:.2f} s" if p99_ok else "P99 unknown"
        b = f"{base:.2f} s" if base is not None else "unknown"
        return stay(ReasonCode.SWITCH_HOLD, f"canary on {target}: {p} vs baseline {b}; "
                    f"{cfg.hold_min - in_phase_min:.0f} min of the hold left")

    # PAUSED
    blocked = state.blocked_profile
    if want != blocked and ahead != blocked:
        return go(SwitchPhase.STEADY, SwitchAction.NONE,
                  Reason(ReasonCode.SWITCH_RESUMED, f"{blocked} no longer asked for ({why_now}): "
                                                    "switching resumes from the next ask"), blocked="")
    return stay(ReasonCode.SWITCH_PAUSED, f"switch to {blocked} paused after a P99 regression; "
                f"{active} serves until the ask changes")
