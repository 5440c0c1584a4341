"""Profile switching state machine: every transition, including rollback, in a real time zone."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, time, timezone
from zoneinfo import ZoneInfo

import pytest

from wu_helpers import flat_forecast, fleet
from warmup.core import (
    ContextMixRule,
    ForecastInput,
    Instance,
    InstanceState,
    ReasonCode,
    ScheduleWindow,
    SwitchAction,
    SwitchConfig,
    SwitchPhase,
    SwitchState,
    decide_switch,
    scheduled_profile,
)

BERLIN = ZoneInfo("Europe/Berlin")
CFG = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", 300.0), ("night", 200.0)),
                   windows=(ScheduleWindow("night", time(22, 0), time(7, 0)),), tz=BERLIN)


def utc(h: int, m: int = 0, day: int = 17, month: int = 5) -> datetime:
    return datetime(2024, month, day, h, m, tzinfo=timezone.utc)


def step(state, now, p99=1.0, instances=None, cfg=CFG, replicas=10, fc=None):
    return decide_switch(cfg, now, instances if instances is not None else fleet(replicas), p99, fc, state,
                         replicas, "day")


def both(day: int, night: int, night_booting: int = 0) -> tuple[Instance, ...]:
    """``day`` ready day instances, ``night`` ready and ``night_booting`` booting night ones."""
    return (fleet(day, profile="day") + tuple(Instance(f"n{i}", InstanceState.READY_BUSY, profile="night")
                                              for i in range(night))
            + tuple(Instance(f"nb{i}", InstanceState.BOOTING, profile="night") for i in range(night_booting)))


def to_canary(p99=1.0):
    """Drive the machine from steady day to the night canary at 22:00 Berlin (20:00 UTC in May):
    10 day replicas serve 3000 req/min; night's whole need is 15 replicas of 200."""
    st = SwitchState()
    d, st, _ = step(st, utc(19, 30), p99)
    assert d.action is SwitchAction.PREWARM
    d, st, _ = step(st, utc(20, 0), p99, instances=both(10, 15))
    assert d.action is SwitchAction.MOVE_CANARY
    return st


def test_schedule_in_time_zone_and_dst() -> None:
    # 22:00 Berlin is 20:00 UTC in summer (CEST) and 21:00 UTC in winter (CET).
    assert scheduled_profile(CFG, utc(19, 59))[0] == "day"
    assert scheduled_profile(CFG, utc(20, 0))[0] == "night"
    assert scheduled_profile(CFG, utc(20, 59, day=15, month=1))[0] == "day"
    assert scheduled_profile(CFG, utc(21, 0, day=15, month=1))[0] == "night"
    assert scheduled_profile(CFG, utc(4, 59))[0] == "night"   # 06:59 Berlin
    assert scheduled_profile(CFG, utc(5, 0))[0] == "day"


def test_steady_does_nothing_with_reason() -> None:
    d, st, ev = step(SwitchState(), utc(19, 0))
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_STEADY and not ev
    assert st.phase is SwitchPhase.STEADY and st.active_profile == "day" and st.transitions == ()


def test_steady_to_prewarm_the_canary_one_cold_start_ahead() -> None:
    d, st, _ = step(SwitchState(), utc(19, 29))
    assert d.action is SwitchAction.NONE
    d, st, _ = step(st, utc(19, 30), replicas=12)
    # 12 day replicas serve 3600 req/min: night (200 each) needs 18; the canary starts now, one replica
    # (beside 12 day ones a round robin sends it 1/13, the nearest to the 10% share); day is untouched.
    assert d.action is SwitchAction.PREWARM and d.to_profile == "night" and d.instances == 1
    assert d.replicas == (("day", 12), ("night", 1)) and "the canary, 1 of the 18 night" in d.reason.text
    assert d.reason.code is ReasonCode.SWITCH_SCHEDULE
    assert st.phase is SwitchPhase.PREWARM and st.target_profile == "night" and st.need_rpm == 3600
    tr = st.transitions[-1]
    assert (tr.from_phase, tr.to_phase, tr.reason.code) == (SwitchPhase.STEADY, SwitchPhase.PREWARM,
                                                            ReasonCode.SWITCH_SCHEDULE)


def test_prewarm_lead_is_the_configured_cold_start() -> None:
    cfg = replace(CFG, prewarm_min=4.0, lead_source="P90 of 3 measured launches")
    d, st, _ = step(SwitchState(), utc(19, 55), cfg=cfg)
    assert d.action is SwitchAction.NONE
    d, st, _ = step(st, utc(19, 56), cfg=cfg)
    assert d.action is SwitchAction.PREWARM and "4.0 min, P90 of 3 measured launches" in d.reason.text


def test_prewarm_waits_for_the_window_then_moves_canary() -> None:
    _, st, _ = step(SwitchState(), utc(19, 30), p99=1.0)
    d, st, _ = step(st, utc(19, 45), p99=1.1, instances=both(10, 0, 1))
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_PREWARMING
    assert d.replicas == (("day", 10), ("night", 1))
    d, st, _ = step(st, utc(20, 0), p99=1.2, instances=both(10, 1))
    assert d.action is SwitchAction.MOVE_CANARY and d.share == pytest.approx(0.1)
    assert st.phase is SwitchPhase.CANARY and st.baseline_p99_s == 1.2   # the last pre-switch P99
    # one night replica (200) covers less than 10% of 3000 req/min: day keeps its 10, the canary takes 1/11
    assert d.replicas == (("day", 10), ("night", 1))
    d, st, _ = step(st, utc(20, 29), p99=1.2, instances=both(10, 1))
    assert d.reason.code is ReasonCode.SWITCH_HOLD and d.replicas == (("day", 10), ("night", 1))
    d, st, _ = step(st, utc(20, 30), p99=1.2, instances=both(10, 1))
    # the move: the rest of night's 15 start now; day goes only as they are ready
    assert d.action is SwitchAction.MOVE_ALL and d.replicas == (("day", 10), ("night", 15))


def test_prewarm_waits_until_target_instances_are_ready() -> None:
    _, st, _ = step(SwitchState(), utc(19, 30))
    d, st, _ = step(st, utc(20, 0), instances=both(10, 0, 1))
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_WAIT_READY
    assert "only 0 of 1" in d.reason.text
    d, st, _ = step(st, utc(20, 1), instances=both(10, 1))
    assert d.action is SwitchAction.MOVE_CANARY
    # The canary gives up only what ready night replicas cover: 1 x 200 of 3000 req/min is not a day replica.
    assert d.replicas == (("day", 10), ("night", 1))


def test_move_retires_day_only_as_night_becomes_ready_then_settles() -> None:
    st = to_canary(p99=1.0)
    d, st, _ = step(st, utc(20, 15), p99=1.15, instances=both(9, 15))      # +15%: inside the 20% limit
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_HOLD
    d, st, ev = step(st, utc(20, 30), p99=1.1, instances=both(9, 6, 9))    # 9 night replicas went down
    assert d.action is SwitchAction.MOVE_ALL and st.phase is SwitchPhase.MOVE and st.active_profile == "day"
    assert d.replicas == (("day", 6), ("night", 15))   # 3000 - 6 x 200 = 1800 uncovered: 6 day replicas
    d, st, _ = step(st, utc(20, 31), p99=1.1, instances=both(6, 12, 3))
    assert d.reason.code is ReasonCode.SWITCH_MOVING and d.replicas == (("day", 2), ("night", 15))
    d, st, _ = step(st, utc(20, 32), p99=1.1, instances=both(2, 15))
    assert st.phase is SwitchPhase.SETTLE and d.replicas == (("day", 0), ("night", 15))
    d, st, _ = step(st, utc(20, 40), p99=1.1, instances=both(0, 15))
    assert d.reason.code is ReasonCode.SWITCH_SETTLING and "7 min of the settle window left" in d.reason.text
    d, st, ev = step(st, utc(20, 47), p99=1.1, instances=both(0, 15))
    assert d.action is SwitchAction.SETTLED and st.phase is SwitchPhase.STEADY and st.active_profile == "night"
    assert d.replicas == (("day", 0), ("night", 15)) and ev and ev[0].kind == "info"
    d, st, _ = step(st, utc(21, 0), instances=both(0, 15))
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_STEADY and d.replicas == ()


def test_canary_rolls_back_on_p99_regression_with_alert_old_capacity_first() -> None:
    st = to_canary(p99=1.0)
    d, st, ev = step(st, utc(20, 10), p99=1.25, instances=both(9, 15))
    assert d.action is SwitchAction.ROLLBACK and d.reason.code is ReasonCode.SWITCH_ROLLBACK_P99
    assert d.to_profile == "day" and d.from_profile == "day"
    assert st.phase is SwitchPhase.ROLLBACK and st.blocked_profile == "night"
    assert len(ev) == 1 and ev[0].kind == "alert" and "25%" in ev[0].reason.text
    # Day back to its whole need; night keeps what 9 ready day replicas do not cover (300 req/min).
    assert d.replicas == (("day", 10), ("night", 2))
    d, st, _ = step(st, utc(20, 11), p99=1.0, instances=both(9, 15, 0) + fleet(0, 1, profile="day"))
    assert d.reason.code is ReasonCode.SWITCH_RESTORING and d.replicas == (("day", 10), ("night", 2))
    d, st, ev = step(st, utc(20, 14), p99=1.0, instances=both(10, 15))
    assert d.action is SwitchAction.RESTORED and st.phase is SwitchPhase.PAUSED and not ev
    assert d.replicas == (("night", 0), ("day", 10)) and st.active_profile == "day"
    # Paused for the rest of the window: no new attempt.
    d, st, ev = step(st, utc(23, 0), p99=1.0)
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_PAUSED and not ev
    # Morning: the night is no longer asked for; switching resumes.
    d, st, _ = step(st, utc(5, 0, day=18), p99=1.0)
    assert d.reason.code is ReasonCode.SWITCH_RESUMED and st.phase is SwitchPhase.STEADY
    assert st.blocked_profile == ""
    # The next evening tries again.
    d, st, _ = step(st, utc(19, 30, day=18))
    assert d.action is SwitchAction.PREWARM


@pytest.mark.parametrize("phase_at", [(SwitchPhase.MOVE, 31), (SwitchPhase.SETTLE, 40)])
def test_breaker_watches_the_move_and_the_settle_window(phase_at) -> None:
    phase, minute = phase_at
    st = to_canary(p99=1.0)
    _, st, _ = step(st, utc(20, 30), p99=1.0, instances=both(9, 6, 9))
    if phase is SwitchPhase.SETTLE:
        _, st, _ = step(st, utc(20, 32), p99=1.0, instances=both(0, 15))
    assert st.phase is phase
    d, st, ev = step(st, utc(20, minute), p99=1.3, instances=both(0, 15))
    assert d.action is SwitchAction.ROLLBACK and st.phase is SwitchPhase.ROLLBACK and ev[0].kind == "alert"
    assert phase.value in d.reason.text and d.replicas == (("day", 10), ("night", 15))


def test_canary_rolled_back_without_alert_when_ask_ends_during_hold() -> None:
    cfg = replace(CFG, windows=(ScheduleWindow("night", time(22, 0), time(22, 10)),))
    _, st, _ = step(SwitchState(), utc(19, 30), cfg=cfg)
    d, st, _ = step(st, utc(20, 0), cfg=cfg, instances=both(10, 15))
    assert st.phase is SwitchPhase.CANARY
    d, st, ev = step(st, utc(20, 10), cfg=cfg, instances=both(9, 15))
    assert d.action is SwitchAction.ROLLBACK and d.reason.code is ReasonCode.SWITCH_CANCELLED and not ev
    assert st.phase is SwitchPhase.ROLLBACK and st.blocked_profile == ""
    d, st, _ = step(st, utc(20, 12), cfg=cfg, instances=both(10, 15))
    assert d.action is SwitchAction.RESTORED and st.phase is SwitchPhase.STEADY and st.active_profile == "day"


def test_morning_switch_runs_in_reverse() -> None:
    st = SwitchState(active_profile="night")
    d, st, _ = step(st, utc(4, 29, day=18))          # 06:29 Berlin
    assert d.action is SwitchAction.NONE
    d, st, _ = step(st, utc(4, 30, day=18))          # 10 night replicas: 2000 req/min, 7 day ones; 1 canary
    assert d.action is SwitchAction.PREWARM and d.to_profile == "day" and d.replicas == (("night", 10), ("day", 1))
    mixed = both(0, 10) + fleet(7, profile="day")
    d, st, _ = step(st, utc(5, 0, day=18), instances=mixed)
    assert d.action is SwitchAction.MOVE_CANARY and d.to_profile == "day"
    d, st, _ = step(st, utc(5, 30, day=18), instances=mixed)
    assert d.action is SwitchAction.MOVE_ALL and st.phase is SwitchPhase.MOVE
    d, st, _ = step(st, utc(5, 31, day=18), instances=mixed)
    d, st, _ = step(st, utc(5, 50, day=18), instances=fleet(7, profile="day"))
    assert d.action is SwitchAction.SETTLED and st.active_profile == "day"


def test_every_transition_is_recorded_with_reason() -> None:
    st = to_canary()
    _, st, _ = step(st, utc(20, 30), instances=both(9, 15))
    phases = [(t.from_phase, t.to_phase) for t in st.transitions]
    assert phases == [(SwitchPhase.STEADY, SwitchPhase.PREWARM), (SwitchPhase.PREWARM, SwitchPhase.CANARY),
                      (SwitchPhase.CANARY, SwitchPhase.MOVE)]
    assert all(t.reason.text for t in st.transitions)
    assert [t.at for t in st.transitions] == [utc(19, 30), utc(20, 0), utc(20, 30)]


def test_without_p99_the_switch_proceeds_and_says_so() -> None:
    st = SwitchState()
    _, st, _ = step(st, utc(19, 30), p99=None)
    d, st, _ = step(st, utc(20, 0), p99=None, instances=both(10, 15))
    assert d.action is SwitchAction.MOVE_CANARY and d.reason.code is ReasonCode.SWITCH_NO_P99
    d, st, _ = step(st, utc(20, 10), p99=None, instances=both(9, 15))
    assert d.reason.code is ReasonCode.SWITCH_HOLD


def test_context_mix_trigger() -> None:
    cfg = replace(CFG, trigger="context_mix", mix_rules=(ContextMixRule("night", 0.5),))
    t = utc(12, 0)
    base = flat_forecast(1000.0, origin=t)

    def with_share(share: float) -> ForecastInput:
        return replace(base, extra=(("long_context_share", (share,) * 30),))

    d, st, _ = step(SwitchState(), t, cfg=cfg, fc=with_share(0.2))
    assert d.action is SwitchAction.NONE
    d, st, _ = step(SwitchState(), t, cfg=cfg, fc=with_share(0.7))
    assert d.action is SwitchAction.PREWARM and d.to_profile == "night"
    assert d.reason.code is ReasonCode.SWITCH_CONTEXT_MIX
    d, st, _ = step(SwitchState(), t, cfg=cfg, fc=base)   # no mix signal: keep the active profile
    assert d.action is SwitchAction.NONE


def test_disabled_switching() -> None:
    d, st, _ = step(SwitchState(), utc(19, 30), cfg=replace(CFG, enabled=False))
    assert d.action is SwitchAction.NONE and st.phase is SwitchPhase.STEADY
