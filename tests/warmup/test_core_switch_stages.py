"""Each stage of the profile-switch state machine on its own (``warmup.core.switching``)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from wu_helpers import T0, fleet, minutes
from warmup.core import (
    Instance,
    InstanceState,
    Reason,
    ReasonCode,
    SwitchAction,
    SwitchConfig,
    SwitchDecision,
    SwitchPhase,
    SwitchState,
    Transition,
)
from warmup.core.switching import (
    MAX_TRANSITIONS,
    PHASE_STEPS,
    SwitchTick,
    canary_step,
    cancel_during_hold,
    complete_after_hold,
    hold_canary,
    move_step,
    moved,
    moving,
    paused_step,
    prewarm_step,
    remain,
    rollback_on_p99,
    rollback_step,
    settle_step,
    settled,
    start_canary,
    steady_step,
    targets_not_ready,
    transition,
)
from warmup.core.switch_capacity import ready_by_profile, replicas_of, single_workload_replicas

CFG = SwitchConfig(enabled=True, default_profile="day", prewarm_min=30, canary_share=0.2, hold_min=30,
                   rollback_p99_rise=0.2, max_prewarm_wait_min=10)
REASON = Reason(ReasonCode.SWITCH_SCHEDULE, "test")


def tick(phase=SwitchPhase.STEADY, *, target="", ahead="day", want="day", p99=1.0, baseline=None,
         since: datetime | None = None, instances=None, replicas=10, blocked="", now=T0) -> SwitchTick:
    state = SwitchState(phase=phase, active_profile="day", target_profile=target, since=since,
                        baseline_p99_s=baseline, blocked_profile=blocked)
    insts = instances if instances is not None else fleet(replicas)
    return SwitchTick(CFG, now, insts, p99, replicas, state, ahead, f"ahead asks {ahead}", want, f"now asks {want}",
                      ready_by_profile(insts, "day"))


def test_every_phase_has_a_step() -> None:
    assert set(PHASE_STEPS) == set(SwitchPhase)


def test_remain_keeps_the_state_and_says_why() -> None:
    st = SwitchState(phase=SwitchPhase.CANARY, active_profile="day", target_profile="night")
    d, st2, ev = remain(st, ReasonCode.SWITCH_HOLD, "holding")
    assert (d.action, d.phase, d.reason.code, d.from_profile, d.to_profile) == (
        SwitchAction.NONE, SwitchPhase.CANARY, ReasonCode.SWITCH_HOLD, "day", "night")
    assert st2 is st and ev == ()


def test_transition_records_from_and_to_and_trims_the_record() -> None:
    t = tick()
    old = Transition(T0 - minutes(60), SwitchPhase.CANARY, SwitchPhase.STEADY, "night", "day", REASON)
    t = replace(t, state=replace(t.state, transitions=(old,) * MAX_TRANSITIONS))
    d, st, ev = transition(t, SwitchPhase.PREWARM, SwitchAction.PREWARM, REASON, target="night", count=2)
    assert len(st.transitions) == MAX_TRANSITIONS
    last = st.transitions[-1]
    assert (last.at, last.from_phase, last.to_phase, last.from_profile, last.to_profile) == (
        T0, SwitchPhase.STEADY, SwitchPhase.PREWARM, "day", "night")
    assert (st.phase, st.target_profile, st.since, st.active_profile) == (SwitchPhase.PREWARM, "night", T0, "day")
    assert (d.action, d.instances, d.to_profile, ev) == (SwitchAction.PREWARM, 2, "night", ())


def test_transition_new_active_and_blocked() -> None:
    t = tick(SwitchPhase.CANARY, target="night", blocked="x")
    d, st, _ = transition(t, SwitchPhase.STEADY, SwitchAction.MOVE_ALL, REASON, new_active="night", share=1.0)
    assert (st.active_profile, st.target_profile, st.blocked_profile, d.to_profile) == ("night", "", "x", "night")
    _, st, _ = transition(t, SwitchPhase.STEADY, SwitchAction.NONE, REASON, blocked="")
    assert st.blocked_profile == ""


def test_steady_stays_when_the_active_profile_is_asked_for() -> None:
    d, st, _ = steady_step(tick())
    assert (d.action, d.reason.code, st.phase) == (SwitchAction.NONE, ReasonCode.SWITCH_STEADY, SwitchPhase.STEADY)


@pytest.mark.parametrize("ahead,want", [("night", "day"), ("day", "night"), ("night", "night")])
def test_steady_prewarms_the_canary_of_the_profile_asked_for(ahead, want) -> None:
    d, st, _ = steady_step(tick(ahead=ahead, want=want, p99=1.5, replicas=12))
    assert (d.action, st.phase, st.target_profile) == (SwitchAction.PREWARM, SwitchPhase.PREWARM, "night")
    # no capacities configured: one req/min per replica, a need of 12; beside 12 old replicas a round
    # robin sends 3 new ones 3/15 = the canary share of 20%
    assert d.instances == 3 and st.need_rpm == 12 and "the canary, 3 of the 12 night" in d.reason.text
    assert st.baseline_p99_s == 1.5
    assert d.reason.code is ReasonCode.SWITCH_SCHEDULE
    assert (ahead if ahead == "night" else "now asks") in d.reason.text


def test_steady_keeps_the_old_baseline_when_p99_is_unknown() -> None:
    t = replace(tick(ahead="night", p99=None), state=replace(tick().state, baseline_p99_s=0.7))
    assert steady_step(t)[1].baseline_p99_s == 0.7


def test_prewarm_cancels_when_the_target_is_no_longer_asked_for() -> None:
    d, st, _ = prewarm_step(tick(SwitchPhase.PREWARM, target="night", baseline=1.0, since=T0 - minutes(5)))
    assert (d.action, d.reason.code, st.phase, st.target_profile) == (
        SwitchAction.CANCEL, ReasonCode.SWITCH_CANCELLED, SwitchPhase.STEADY, "")


def test_prewarm_waits_until_the_target_is_asked_for_now_and_learns_the_baseline() -> None:
    d, st, _ = prewarm_step(tick(SwitchPhase.PREWARM, target="night", ahead="night", p99=0.9, baseline=1.0))
    assert (d.action, d.reason.code, st.phase, st.baseline_p99_s) == (
        SwitchAction.NONE, ReasonCode.SWITCH_PREWARMING, SwitchPhase.PREWARM, 0.9)


def test_prewarm_moves_the_canary_once_asked_for_now() -> None:
    d, st, _ = prewarm_step(tick(SwitchPhase.PREWARM, target="night", ahead="night", want="night", p99=None,
                                 baseline=1.1, since=T0 - minutes(30), instances=tagged(2, 0)))
    assert (d.action, st.phase, st.baseline_p99_s, d.share) == (SwitchAction.MOVE_CANARY, SwitchPhase.CANARY, 1.1, 0.2)


def test_prewarm_waits_for_untagged_targets_no_more() -> None:
    # Instances without a profile run the active one: none of them counts as a ready target.
    t = tick(SwitchPhase.PREWARM, target="night", want="night", since=T0 - minutes(35))
    assert targets_not_ready(t, t.state)[0].reason.code is ReasonCode.SWITCH_WAIT_READY


def tagged(ready_night: int, booting_night: int) -> tuple[Instance, ...]:
    return (tuple(Instance(f"n{i}", InstanceState.READY_IDLE, profile="night") for i in range(ready_night))
            + tuple(Instance(f"b{i}", InstanceState.BOOTING, profile="night") for i in range(booting_night))
            + fleet(10, profile="day"))


def test_targets_not_ready_waits_for_ready_target_instances() -> None:
    t = tick(SwitchPhase.PREWARM, target="night", want="night", since=T0 - minutes(35), instances=tagged(1, 1))
    d, st, _ = targets_not_ready(t, t.state)
    assert d.reason.code is ReasonCode.SWITCH_WAIT_READY and "only 1 of 2" in d.reason.text
    assert st.phase is SwitchPhase.PREWARM


def test_targets_not_ready_passes_when_ready_or_waited_too_long() -> None:
    ready = tick(SwitchPhase.PREWARM, target="night", since=T0 - minutes(35), instances=tagged(2, 0))
    too_long = tick(SwitchPhase.PREWARM, target="night", since=T0 - minutes(41), instances=tagged(0, 2))
    for t in (ready, too_long):
        assert targets_not_ready(t, t.state) is None


def test_start_canary_says_when_no_baseline_is_known() -> None:
    t = tick(SwitchPhase.PREWARM, target="night")
    assert start_canary(t, None)[0].reason.code is ReasonCode.SWITCH_NO_P99
    d, st, _ = start_canary(t, 1.0)
    assert (d.reason.code, d.instances, st.baseline_p99_s) == (ReasonCode.SWITCH_CANARY, 2, 1.0)


def canary(p99=1.0, baseline=1.0, want="night", in_phase=10) -> SwitchTick:
    return tick(SwitchPhase.CANARY, target="night", ahead=want, want=want, p99=p99, baseline=baseline,
                since=T0 - minutes(in_phase))


def test_rollback_on_p99_only_above_the_limit() -> None:
    assert rollback_on_p99(canary(p99=1.19)) is None
    assert rollback_on_p99(canary(p99=None)) is None
    assert rollback_on_p99(canary(p99=5.0, baseline=None)) is None
    d, st, ev = rollback_on_p99(canary(p99=1.5))
    assert (d.action, d.to_profile, st.phase, st.blocked_profile) == (
        SwitchAction.ROLLBACK, "day", SwitchPhase.ROLLBACK, "night")
    assert [e.kind for e in ev] == ["alert"] and st.transitions[-1].to_profile == "night"


def test_cancel_during_hold_moves_the_canary_back_without_alert() -> None:
    assert cancel_during_hold(canary()) is None
    d, st, ev = cancel_during_hold(canary(want="day"))
    assert (d.action, d.to_profile, st.phase, ev) == (SwitchAction.ROLLBACK, "day", SwitchPhase.ROLLBACK, ())
    assert st.target_profile == "night" and st.blocked_profile == ""   # retired once day is ready again


def test_complete_after_hold_starts_the_move_day_still_active() -> None:
    assert complete_after_hold(canary(in_phase=29)) is None
    d, st, ev = complete_after_hold(canary(in_phase=30, p99=None))
    assert (d.action, d.share, st.active_profile, st.phase) == (SwitchAction.MOVE_ALL, 1.0, "day", SwitchPhase.MOVE)
    assert "P99 unknown" in d.reason.text and "only as night replicas are ready" in d.reason.text and ev == ()


def test_hold_canary_says_how_long_is_left() -> None:
    d, st, _ = hold_canary(canary(in_phase=12))
    assert d.reason.code is ReasonCode.SWITCH_HOLD and "18 min of the hold left" in d.reason.text


def test_paused_resumes_only_when_the_blocked_profile_is_not_asked_for() -> None:
    d, st, _ = paused_step(tick(SwitchPhase.PAUSED, blocked="night", ahead="night"))
    assert (d.reason.code, st.phase) == (ReasonCode.SWITCH_PAUSED, SwitchPhase.PAUSED)
    d, st, _ = paused_step(tick(SwitchPhase.PAUSED, blocked="night"))
    assert (d.reason.code, st.phase, st.blocked_profile) == (ReasonCode.SWITCH_RESUMED, SwitchPhase.STEADY, "")


def test_canary_step_checks_p99_first_then_the_ask_then_the_hold() -> None:
    d, st, ev = canary_step(canary(p99=1.5, want="day"))   # a P99 trip wins over the ask ending
    assert (d.reason.code, st.phase, [e.kind for e in ev]) == (ReasonCode.SWITCH_ROLLBACK_P99, SwitchPhase.ROLLBACK,
                                                               ["alert"])
    assert canary_step(canary(want="day"))[0].reason.code is ReasonCode.SWITCH_CANCELLED
    assert canary_step(canary(in_phase=30))[1].phase is SwitchPhase.MOVE
    assert canary_step(canary(in_phase=10))[0].reason.code is ReasonCode.SWITCH_HOLD


def moving_tick(phase=SwitchPhase.MOVE, *, ready_night=10, in_phase=5, p99=1.0, want="night") -> SwitchTick:
    return tick(phase, target="night", ahead=want, want=want, p99=p99, baseline=1.0, since=T0 - minutes(in_phase),
                instances=tagged(ready_night, 0))


def test_moved_settles_once_ready_targets_cover_the_need() -> None:
    assert moved(moving_tick(ready_night=4)) is None
    d, st, _ = moved(moving_tick(ready_night=10))
    assert (d.reason.code, st.phase, st.active_profile) == (ReasonCode.SWITCH_SETTLING, SwitchPhase.SETTLE, "day")
    assert "10 ready night replica(s) cover 10 req/min" in d.reason.text


def test_moving_says_how_many_old_replicas_stay() -> None:
    d, st, _ = moving(moving_tick(ready_night=4))
    assert (d.reason.code, st.phase) == (ReasonCode.SWITCH_MOVING, SwitchPhase.MOVE) and "day keeps 6" in d.reason.text


def test_move_step_watches_p99_then_settles_or_keeps_moving() -> None:
    assert move_step(moving_tick(p99=1.5))[0].reason.code is ReasonCode.SWITCH_ROLLBACK_P99
    assert move_step(moving_tick(want="day"))[0].reason.code is ReasonCode.SWITCH_CANCELLED
    assert move_step(moving_tick(ready_night=10))[1].phase is SwitchPhase.SETTLE
    assert move_step(moving_tick(ready_night=4))[0].reason.code is ReasonCode.SWITCH_MOVING


def test_settled_makes_the_target_active_after_the_settle_window() -> None:
    d, st, ev = settled(moving_tick(SwitchPhase.SETTLE, in_phase=10))
    assert (d.reason.code, st.phase) == (ReasonCode.SWITCH_SETTLING, SwitchPhase.SETTLE) and ev == ()
    assert "5 min of the settle window left" in d.reason.text
    d, st, ev = settled(moving_tick(SwitchPhase.SETTLE, in_phase=15))
    assert (d.action, d.reason.code, st.phase, st.active_profile, st.target_profile) == (
        SwitchAction.SETTLED, ReasonCode.SWITCH_COMPLETE, SwitchPhase.STEADY, "night", "")
    assert [e.kind for e in ev] == ["info"]


def test_settle_step_watches_p99_until_settled() -> None:
    assert settle_step(moving_tick(SwitchPhase.SETTLE, p99=1.5))[1].phase is SwitchPhase.ROLLBACK
    assert settle_step(moving_tick(SwitchPhase.SETTLE, want="day"))[0].reason.code is ReasonCode.SWITCH_CANCELLED
    assert settle_step(moving_tick(SwitchPhase.SETTLE, in_phase=15))[1].active_profile == "night"


def test_rollback_step_retires_the_target_only_once_the_old_side_is_back() -> None:
    d, st, _ = rollback_step(tick(SwitchPhase.ROLLBACK, target="night", instances=fleet(4)))
    assert (d.reason.code, st.phase) == (ReasonCode.SWITCH_RESTORING, SwitchPhase.ROLLBACK)
    assert "night keeps 6 until day covers 10 req/min" in d.reason.text
    d, st, _ = rollback_step(tick(SwitchPhase.ROLLBACK, target="night"))
    assert (d.action, d.reason.code, d.to_profile, st.phase) == (
        SwitchAction.RESTORED, ReasonCode.SWITCH_RESTORED, "day", SwitchPhase.STEADY)
    d, st, _ = rollback_step(tick(SwitchPhase.ROLLBACK, target="night", blocked="night"))   # after a P99 trip
    assert st.phase is SwitchPhase.PAUSED and d.reason.text.endswith("switching paused")


def test_replicas_of_gives_the_split_inside_a_switch_and_the_whole_need_at_its_end() -> None:
    steady = SwitchState(phase=SwitchPhase.STEADY, active_profile="day")
    settle = SwitchState(phase=SwitchPhase.SETTLE, active_profile="day", target_profile="night", need_rpm=10.0)
    assert replicas_of(CFG, steady, steady, 10.0, {}) == ()
    assert replicas_of(CFG, settle, settle, 10.0, {"night": 10}) == (("day", 0), ("night", 10))
    done = replace(settle, phase=SwitchPhase.STEADY, active_profile="night", target_profile="")
    assert replicas_of(CFG, settle, done, None, {}) == (("day", 0), ("night", 10))      # the state's need
    back = replace(settle, phase=SwitchPhase.STEADY, target_profile="")                  # rolled back: day stays
    assert replicas_of(CFG, settle, back, 10.0, {}) == (("night", 0), ("day", 10))


@pytest.mark.parametrize("phase", [SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.SETTLE])
def test_the_breaker_says_what_it_compared_in_every_watched_phase(phase) -> None:
    t = tick(phase, target="night", ahead="night", want="night", p99=1.1, baseline=1.0, since=T0 - minutes(1))
    d, st, ev = PHASE_STEPS[phase](t)
    assert (st.phase, ev) == (phase, ())
    assert f"breaker in the {phase.value}: P99 1.10 s within 20% of baseline 1.00 s" in d.reason.text
    d, st, ev = PHASE_STEPS[phase](replace(t, p99_s=1.3))   # the same check trips it in that phase
    assert st.phase is SwitchPhase.ROLLBACK and f"during the {phase.value}" in d.reason.text and ev
    d, _, _ = PHASE_STEPS[phase](replace(t, p99_s=None))
    assert f"breaker in the {phase.value}: P99 unknown" in d.reason.text


def _switch(phase, action=SwitchAction.NONE, frm="night", to="day", replicas=(("night", 0), ("day", 4))):
    return SwitchDecision(action, REASON, phase, from_profile=frm, to_profile=to, replicas=replicas)


def test_single_workload_count_never_falls_while_rolling_then_is_the_targets() -> None:
    # night -> day: 6 night pods serve the need; day needs 4.  maxUnavailable 0 counts pods, so 4
    # while rolling would retire 2 night pods before any day pod is ready.
    assert single_workload_replicas(_switch(SwitchPhase.CANARY, SwitchAction.MOVE_CANARY), 6) == 6
    assert single_workload_replicas(_switch(SwitchPhase.MOVE), 6) == 6
    # day -> night at the canary: its replicas name the canary's 1 night pod, but a single workload rolls
    # whole, so it takes night's whole need (6 for what 4 day pods served)
    canary = replace(_switch(SwitchPhase.CANARY, SwitchAction.MOVE_CANARY, "day", "night", (("day", 4), ("night", 1))),
                     target_need=6)
    assert single_workload_replicas(canary, 4) == 6
    assert single_workload_replicas(_switch(SwitchPhase.SETTLE), 6) == 4       # day's ready pods cover it
    assert single_workload_replicas(_switch(SwitchPhase.MOVE, replicas=(("night", 1), ("day", 8))), 6) == 8
    # a rollback rolls onto the active profile (the decision's from_profile) and keeps the pods
    back = _switch(SwitchPhase.ROLLBACK, replicas=(("night", 6), ("day", 2)))
    assert single_workload_replicas(back, 4) == 6
    restored = _switch(SwitchPhase.STEADY, SwitchAction.RESTORED, "night", "night", (("day", 0), ("night", 6)))
    assert single_workload_replicas(restored, 8) == 6
    assert single_workload_replicas(_switch(SwitchPhase.PREWARM, SwitchAction.PREWARM), 6) is None
    assert single_workload_replicas(_switch(SwitchPhase.STEADY, SwitchAction.CANCEL), 6) is None
    assert single_workload_replicas(_switch(SwitchPhase.STEADY, replicas=()), 6) is None
