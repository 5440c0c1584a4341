"""Profile switching as a state machine that never lowers ready capacity (make before break).

A profile is a set of vLLM engine arguments with its own capacity (say ``day``:
max-num-seqs 16, block-size 16; ``night``: max-num-seqs 8, block-size 32).  Which
profile is asked for comes from schedule windows in a time zone, or from the
forecast share of long-context requests.

    STEADY --(ask changes one cold start ahead)--> PREWARM     start the canary's share of the target
    PREWARM --(ask no longer there)-------------> STEADY      cancel: the pre-warmed targets go
    PREWARM --(ask starts, canary targets ready)-> CANARY      the old side gives up canary_share
    CANARY --(hold_min passed, P99 fine)---------> MOVE        the rest of the target starts; old retired
                                                                only as targets become ready
    MOVE --(no old replica left to keep)---------> SETTLE      the target serves all, still watched
    SETTLE --(settle_min passed, P99 fine)-------> STEADY      the target is the active profile
    CANARY/MOVE/SETTLE --(P99 > baseline*(1+rise))--> ROLLBACK  alert; old restored first
    CANARY/MOVE/SETTLE --(ask ends)---------------> ROLLBACK  no alert
    ROLLBACK --(old ready capacity back)---------> PAUSED (after a P99 trip) or STEADY
    PAUSED --(ask no longer the rolled-back)-----> STEADY      resume

``prewarm_min`` is the measured cold start (the caller's lead), so the targets are ready at the
switch time.  How many replicas each profile has in every phase is
:func:`warmup.core.switch_capacity.split` (carried in each decision's ``replicas``).  The morning
switch is the same machine with day as the target.  Every transition is recorded with its reason
in ``SwitchState.transitions``.  Each phase is one small function (``PHASE_STEPS``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, time as dtime, timedelta, timezone
from typing import Callable, Mapping, Optional

from warmup.core.config import SwitchConfig
from warmup.core.decisions import Event, SwitchAction, SwitchDecision
from warmup.core.inputs import ForecastInput, Instance, as_utc
from warmup.core.mix_trigger import MixAsk
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.state import IN_SWITCH, SwitchPhase, SwitchState, Transition
from warmup.core.switch_capacity import canary_count, canary_request_share, keep, ready_by_profile, sized, whole

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
    offset = fc.offset(now)
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


# --------------------------------------------------------------------------- the state machine
#
# One small function per phase (``PHASE_STEPS``); each sees the tick as a :class:`SwitchTick`
# and returns a :class:`SwitchOutcome` with its reason, also when nothing changes.


SwitchOutcome = tuple[SwitchDecision, SwitchState, tuple[Event, ...]]
WATCHED = (SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.SETTLE)   # the P99 breaker watches these


@dataclass(frozen=True, slots=True)
class SwitchTick:
    """What one tick of the state machine sees: its inputs and the profiles asked for."""

    cfg: SwitchConfig
    now: datetime
    instances: tuple[Instance, ...]
    p99_s: Optional[float]
    replicas: int
    state: SwitchState   # with the active profile filled in
    ahead: str           # profile asked for ``prewarm_min`` from now
    why_ahead: str
    want: str            # profile asked for now
    why_now: str
    ready: Mapping[str, int] = field(default_factory=dict)   # ready replicas per profile
    need_rpm: Optional[float] = None                          # the plan's need now (None: the state's)

    @property
    def active(self) -> str:
        return self.state.active_profile

    @property
    def p99_known(self) -> bool:
        return self.p99_s is not None and math.isfinite(self.p99_s) and self.p99_s > 0

    @property
    def in_phase_min(self) -> float:
        since = as_utc(self.state.since) if self.state.since is not None else self.now
        return (self.now - since).total_seconds() / 60.0

    @property
    def trigger_code(self) -> ReasonCode:
        return ReasonCode.SWITCH_CONTEXT_MIX if self.cfg.trigger == "context_mix" else ReasonCode.SWITCH_SCHEDULE

    def cap(self, profile: str) -> float:
        return self.cfg.capacity_of(profile, 1.0)

    @property
    def need(self) -> float:
        """Capacity (req/min) to keep ready: the caller's, else the state's, else what serves now."""
        if self.need_rpm is not None:
            return self.need_rpm
        if self.state.need_rpm is not None:
            return self.state.need_rpm
        return self.replicas * self.cap(self.active)

    def breaker(self) -> str:
        """The P99 breaker's verdict this tick when it did not trip, naming the phase it watched, so
        the audit shows it checked the canary, the move and the settle window alike."""
        base, at = self.state.baseline_p99_s, f"breaker in the {self.state.phase.value}"
        if not self.p99_known:
            return f"{at}: P99 unknown, nothing to compare with the baseline"
        if base is None:
            return f"{at}: P99 {self.p99_s:.2f} s, no pre-switch baseline to compare with"
        return f"{at}: P99 {self.p99_s:.2f} s within {self.cfg.rollback_p99_rise:.0%} of baseline {base:.2f} s"


def remain(state: SwitchState, code: ReasonCode, text: str) -> SwitchOutcome:
    """No transition: the phase stays as it is, with the reason why."""
    return SwitchDecision(SwitchAction.NONE, Reason(code, text), state.phase, from_profile=state.active_profile,
                          to_profile=state.target_profile), state, ()


def transition(t: SwitchTick, to_phase: SwitchPhase, action: SwitchAction, reason: Reason, *,
               new_active: Optional[str] = None, target: str = "", share: float = 0.0, count: int = 0,
               baseline: Optional[float] = None, blocked: Optional[str] = None, need: Optional[float] = None,
               events: tuple[Event, ...] = ()) -> SwitchOutcome:
    """Move to ``to_phase`` with ``action``; the transition is recorded in the new state.  Inside a
    switch the baseline and the need are kept unless given; a switch's end clears them."""
    state = t.state
    inside = to_phase in IN_SWITCH
    to_profile = target or (new_active or state.active_profile)
    record = Transition(t.now, state.phase, to_phase, state.active_profile, to_profile, reason)
    new_state = replace(state, phase=to_phase, since=t.now,
                        active_profile=new_active if new_active is not None else state.active_profile,
                        target_profile=target,
                        baseline_p99_s=baseline if baseline is not None or not inside else state.baseline_p99_s,
                        need_rpm=need if need is not None or not inside else state.need_rpm,
                        blocked_profile=state.blocked_profile if blocked is None else blocked,
                        transitions=(state.transitions + (record,))[-MAX_TRANSITIONS:])
    decision = SwitchDecision(action, reason, to_phase, from_profile=state.active_profile, to_profile=to_profile,
                              share=share, instances=count)
    return decision, new_state, events


def steady_step(t: SwitchTick) -> SwitchOutcome:
    """STEADY: pre-warm the canary's share of the target when it is asked for one cold start ahead (or now)."""
    active = t.active
    target = t.ahead if t.ahead != active else (t.want if t.want != active else "")
    if not target:
        return remain(t.state, ReasonCode.SWITCH_STEADY, f"{active} serves and stays asked for ({t.why_ahead})")
    need = t.need
    whole_need = whole(need, t.cap(target))
    n = canary_count(t.cfg, need, active, target)
    why = t.why_ahead if target == t.ahead else t.why_now
    lead = f"one cold start ({t.cfg.prewarm_min:.1f} min{', ' + t.cfg.lead_source if t.cfg.lead_source else ''})"
    return transition(t, SwitchPhase.PREWARM, SwitchAction.PREWARM,
                      Reason(t.trigger_code, f"{why}; profile {target} asked for within {lead}: pre-warming "
                                             f"the canary, {n} of the {whole_need} {target} instance(s) "
                                             f"{need:.0f} req/min needs, while {active} keeps serving"),
                      target=target, count=n, need=need,
                      baseline=t.p99_s if t.p99_known else t.state.baseline_p99_s)


def prewarm_step(t: SwitchTick) -> SwitchOutcome:
    """PREWARM: cancel when the target is no longer asked for, keep waiting until it is asked for
    now and its instances are ready, then move the canary."""
    target = t.state.target_profile
    baseline = t.p99_s if t.p99_known else t.state.baseline_p99_s   # the latest pre-switch P99
    waiting = replace(t.state, baseline_p99_s=baseline)
    if t.ahead != target and t.want != target:
        return transition(t, SwitchPhase.STEADY, SwitchAction.CANCEL,
                          Reason(ReasonCode.SWITCH_CANCELLED, f"{target} is no longer asked for ({t.why_ahead}): "
                                                              "pre-warmed instances are dropped"))
    if t.want != target:
        return remain(waiting, ReasonCode.SWITCH_PREWARMING, f"pre-warming {target}; {t.why_ahead}")
    return targets_not_ready(t, waiting) or start_canary(t, baseline)


def targets_not_ready(t: SwitchTick, waiting: SwitchState) -> Optional[SwitchOutcome]:
    """Wait for the canary share of the target's need to be ready, at most ``max_prewarm_wait_min``
    past the pre-warm lead (moving on is safe: the old side goes only as targets are ready)."""
    target = waiting.target_profile
    n = canary_count(t.cfg, t.need, t.active, target)
    ready_targets = t.ready.get(target, 0)
    waited = t.in_phase_min - t.cfg.prewarm_min
    if ready_targets < n and waited < t.cfg.max_prewarm_wait_min:
        return remain(waiting, ReasonCode.SWITCH_WAIT_READY, f"{target} asked for now but only {ready_targets} "
                      f"of {n} pre-warmed instance(s) are ready")
    return None


def start_canary(t: SwitchTick, baseline: Optional[float]) -> SwitchOutcome:
    """The old side gives up ``canary_share`` of capacity (covered by ready targets); hold it
    against the pre-switch P99."""
    cfg, target = t.cfg, t.state.target_profile
    share = canary_request_share(cfg, t.need, t.active, target)
    text = (f"{t.why_now}; moving {cfg.canary_share:.0%} of capacity to {target} and holding "
            f"{cfg.hold_min:.0f} min against the pre-switch P99; {_routed(cfg, share)}")
    if baseline is None:
        text += " (no pre-switch P99 known: the hold cannot compare latency)"
    code = ReasonCode.SWITCH_CANARY if baseline is not None else ReasonCode.SWITCH_NO_P99
    return transition(t, SwitchPhase.CANARY, SwitchAction.MOVE_CANARY, Reason(code, text), target=target,
                      share=share, count=canary_count(cfg, t.need, t.active, target), baseline=baseline)


def _routed(cfg: SwitchConfig, share: float) -> str:
    """How many of the requests the canary gets, in words (issue 42: round robin gave one canary replica
    of two 50% of the requests while the plan said 10%)."""
    if cfg.routing == "weights":
        return f"the route sends the canary {share:.0%} of requests by weight"
    said = f"round robin sends the canary {share:.0%} of requests (its share of the ready replicas)"
    return said if abs(share - cfg.canary_share) < 0.02 else said + f", not the {cfg.canary_share:.0%} asked"


def canary_step(t: SwitchTick) -> SwitchOutcome:
    """CANARY: roll back on a P99 regression or when the ask ends; start the move after the hold."""
    return rollback_on_p99(t) or cancel_during_hold(t) or complete_after_hold(t) or hold_canary(t)


def rollback_on_p99(t: SwitchTick) -> Optional[SwitchOutcome]:
    """P99 above the pre-switch baseline by more than ``rollback_p99_rise`` (canary, move or settle):
    roll back (the old profile's capacity first), pause, alert."""
    target, base, rise = t.state.target_profile, t.state.baseline_p99_s, t.cfg.rollback_p99_rise
    if not (t.p99_known and base is not None and t.p99_s > base * (1.0 + rise)):
        return None
    reason = Reason(ReasonCode.SWITCH_ROLLBACK_P99,
                    f"P99 {t.p99_s:.2f} s is {t.p99_s / base - 1:.0%} above the pre-switch baseline "
                    f"{base:.2f} s (limit {rise:.0%}) during the {t.state.phase.value}: switch to {target} "
                    f"paused, restoring {t.active}'s ready capacity before {target} is retired")
    alert = (Event(t.now, "alert", reason),)
    decision, state, _ = transition(t, SwitchPhase.ROLLBACK, SwitchAction.ROLLBACK, reason, target=target,
                                    share=t.cfg.canary_share, blocked=target, events=alert)
    return replace(decision, to_profile=t.active), state, alert


def cancel_during_hold(t: SwitchTick) -> Optional[SwitchOutcome]:
    """The target is no longer asked for (canary, move or settle): roll back, no alert."""
    target = t.state.target_profile
    if t.want == target:
        return None
    reason = Reason(ReasonCode.SWITCH_CANCELLED, f"{target} no longer asked for during the "
                    f"{t.state.phase.value} ({t.why_now}): restoring {t.active} before {target} is retired")
    decision, state, events = transition(t, SwitchPhase.ROLLBACK, SwitchAction.ROLLBACK, reason, target=target,
                                         share=t.cfg.canary_share)
    return replace(decision, to_profile=t.active), state, events


def complete_after_hold(t: SwitchTick) -> Optional[SwitchOutcome]:
    """``hold_min`` passed without a regression: the move starts (old retired as targets are ready)."""
    if t.in_phase_min < t.cfg.hold_min:
        return None
    target = t.state.target_profile
    reason = Reason(ReasonCode.SWITCH_COMPLETE, f"held {t.cfg.hold_min:.0f} min ({t.breaker()}): moving all "
                    f"capacity to {target}, retiring {t.active} only as {target} replicas are ready")
    return transition(t, SwitchPhase.MOVE, SwitchAction.MOVE_ALL, reason, target=target, share=1.0,
                      count=whole(t.need, t.cap(target)))


def hold_canary(t: SwitchTick) -> SwitchOutcome:
    return remain(t.state, ReasonCode.SWITCH_HOLD, f"canary on {t.state.target_profile} ({t.breaker()}); "
                  f"{t.cfg.hold_min - t.in_phase_min:.0f} min of the hold left")


def move_step(t: SwitchTick) -> SwitchOutcome:
    """MOVE: the breaker still watches; settle once no old replica is needed any more."""
    return rollback_on_p99(t) or cancel_during_hold(t) or moved(t) or moving(t)


def moved(t: SwitchTick) -> Optional[SwitchOutcome]:
    target = t.state.target_profile
    if keep(t.need, t.ready.get(target, 0), t.cap(target), t.cap(t.active)) > 0:
        return None
    reason = Reason(ReasonCode.SWITCH_SETTLING, f"{t.ready.get(target, 0)} ready {target} replica(s) cover "
                    f"{t.need:.0f} req/min: {t.active} retired ({t.breaker()}); {t.cfg.settle_min:.0f} min to settle")
    return transition(t, SwitchPhase.SETTLE, SwitchAction.NONE, reason, target=target, share=1.0)


def moving(t: SwitchTick) -> SwitchOutcome:
    target = t.state.target_profile
    left = keep(t.need, t.ready.get(target, 0), t.cap(target), t.cap(t.active))
    return remain(t.state, ReasonCode.SWITCH_MOVING, f"{t.ready.get(target, 0)} {target} replica(s) ready: "
                  f"{t.active} keeps {left} until more are ready ({t.breaker()})")


def settle_step(t: SwitchTick) -> SwitchOutcome:
    """SETTLE: the breaker watches until the target has held ``settle_min``; then it is active."""
    return rollback_on_p99(t) or cancel_during_hold(t) or settled(t)


def settled(t: SwitchTick) -> SwitchOutcome:
    target = t.state.target_profile
    if t.in_phase_min < t.cfg.settle_min:
        return remain(t.state, ReasonCode.SWITCH_SETTLING, f"{target} serves all ({t.breaker()}); "
                      f"{t.cfg.settle_min - t.in_phase_min:.0f} min of the settle window left")
    reason = Reason(ReasonCode.SWITCH_COMPLETE, f"{target} held {t.cfg.settle_min:.0f} min after the move "
                    f"({t.breaker()}): {target} is the active profile")
    return transition(t, SwitchPhase.STEADY, SwitchAction.SETTLED, reason, new_active=target, share=1.0,
                      events=(Event(t.now, "info", reason),))


def rollback_step(t: SwitchTick) -> SwitchOutcome:
    """ROLLBACK: the target is retired only once the old profile's ready capacity is back."""
    target, old = t.state.target_profile, t.active
    left = keep(t.need, t.ready.get(old, 0), t.cap(old), t.cap(target))
    if left > 0:
        return remain(t.state, ReasonCode.SWITCH_RESTORING, f"{t.ready.get(old, 0)} {old} replica(s) ready: "
                      f"{target} keeps {left} until {old} covers {t.need:.0f} req/min again")
    paused = t.state.blocked_profile == target
    reason = Reason(ReasonCode.SWITCH_RESTORED, f"{t.ready.get(old, 0)} ready {old} replica(s) cover "
                    f"{t.need:.0f} req/min again: {target} retired" + (", switching paused" if paused else ""))
    decision, state, events = transition(t, SwitchPhase.PAUSED if paused else SwitchPhase.STEADY,
                                         SwitchAction.RESTORED, reason)
    return replace(decision, to_profile=old), state, events


def paused_step(t: SwitchTick) -> SwitchOutcome:
    """PAUSED: resume once the rolled-back profile is no longer asked for."""
    blocked = t.state.blocked_profile
    if t.want != blocked and t.ahead != blocked:
        return transition(t, SwitchPhase.STEADY, SwitchAction.NONE,
                          Reason(ReasonCode.SWITCH_RESUMED, f"{blocked} no longer asked for ({t.why_now}): "
                                                            "switching resumes from the next ask"), blocked="")
    return remain(t.state, ReasonCode.SWITCH_PAUSED, f"switch to {blocked} paused after a P99 regression; "
                  f"{t.active} serves until the ask changes")


PHASE_STEPS: dict[SwitchPhase, Callable[[SwitchTick], SwitchOutcome]] = {
    SwitchPhase.STEADY: steady_step,
    SwitchPhase.PREWARM: prewarm_step,
    SwitchPhase.CANARY: canary_step,
    SwitchPhase.MOVE: move_step,
    SwitchPhase.SETTLE: settle_step,
    SwitchPhase.ROLLBACK: rollback_step,
    SwitchPhase.PAUSED: paused_step,
}


def decide_switch(cfg: SwitchConfig, now: datetime, instances: tuple[Instance, ...], p99_s: Optional[float],
                  forecast: Optional[ForecastInput], state: SwitchState, replicas: int,
                  active_profile: str = "", mix: Optional[MixAsk] = None, *,
                  ready: Optional[Mapping[str, int]] = None, need_rpm: Optional[float] = None) -> SwitchOutcome:
    """One tick of the state machine: the profiles asked for ahead and now, then the current phase's
    step; the decision carries the replicas per profile.  ``mix``: what the live context mix asks for
    (``mix_trigger.decide_mix``), an ask wins over the clock; ``ready``: ready replicas per profile,
    else counted from the instances; ``need_rpm``: the plan's need, else the state's."""
    now = as_utc(now)
    active = state.active_profile or active_profile or cfg.default_profile
    state = replace(state, active_profile=active)
    if not cfg.enabled:
        return remain(state, ReasonCode.SWITCH_STEADY, f"profile switching disabled; {active} serves")
    ahead, why_ahead = asked_profile(cfg, forecast, now, cfg.prewarm_min, active)
    want, why_now = asked_profile(cfg, forecast, now, 0.0, active)
    if mix is not None and mix.profile:  # the mix cannot see ahead: asked for now and within the pre-warm
        (ahead, why_ahead), (want, why_now) = (mix.profile, mix.why), (mix.profile, mix.why)
    ready = dict(ready) if ready is not None else ready_by_profile(instances, active)
    tick = SwitchTick(cfg, now, instances, p99_s, replicas, state, ahead, why_ahead, want, why_now, ready, need_rpm)
    decision, new_state, events = PHASE_STEPS[state.phase](tick)
    if new_state.phase in IN_SWITCH and need_rpm is not None:
        new_state = replace(new_state, need_rpm=need_rpm)
    return sized(cfg, decision, state, new_state, tick.need, ready), new_state, events
