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


def to_canary(p99=1.0):
    """Drive the machine from steady day to the night canary at 22:00 Berlin (20:00 UTC in May)."""
    st = SwitchState()
    d, st, _ = step(st, utc(19, 30), p99)
    assert d.action is SwitchAction.PREWARM
    d, st, _ = step(st, utc(20, 0), p99)
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


def test_steady_to_prewarm_thirty_minutes_ahead() -> None:
    d, st, _ = step(SwitchState(), utc(19, 29))
    assert d.action is SwitchAction.NONE
    d, st, _ = step(st, utc(19, 30), replicas=12)
    assert d.action is SwitchAction.PREWARM and d.to_profile == "night" and d.instances == 2  # ceil(10% of 12)
    assert d.reason.code is ReasonCode.SWITCH_SCHEDULE
    assert st.phase is SwitchPhase.PREWARM and st.target_profile == "night"
    tr = st.transitions[-1]
    assert (tr.from_phase, tr.to_phase, tr.reason.code) == (SwitchPhase.STEADY, SwitchPhase.PREWARM,
                                                            ReasonCode.SWITCH_SCHEDULE)


def test_prewarm_waits_for_the_window_then_moves_canary() -> None:
    _, st, _ = step(SwitchState(), utc(19, 30), p99=1.0)
    d, st, _ = step(st, utc(19, 45), p99=1.1)
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_PREWARMING
    d, st, _ = step(st, utc(20, 0), p99=1.2)
    assert d.action is SwitchAction.MOVE_CANARY and d.share == pytest.approx(0.1)
    assert st.phase is SwitchPhase.CANARY and st.baseline_p99_s == 1.2   # the last pre-switch P99


def test_prewarm_waits_until_target_instances_are_ready() -> None:
    _, st, _ = step(SwitchState(), utc(19, 30))
    inst = fleet(9, profile="day") + (Instance("n0", InstanceState.BOOTING, profile="night"),)
    d, st, _ = step(st, utc(20, 0), instances=inst)
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_WAIT_READY
    inst = fleet(9, profile="day") + (Instance("n0", InstanceState.READY_IDLE, profile="night"),)
    d, st, _ = step(st, utc(20, 1), instances=inst)
    assert d.action is SwitchAction.MOVE_CANARY


def test_prewarm_cancelled_when_ask_goes_away() -> None:
    cfg = replace(CFG, windows=(ScheduleWindow("night", time(22, 0), time(22, 10)),))
    _, st, _ = step(SwitchState(), utc(19, 30), cfg=cfg)
    assert st.phase is SwitchPhase.PREWARM
    d, st, _ = step(st, utc(20, 10), cfg=cfg)  # window over at 22:10 Berlin, next one is tomorrow
    assert d.action is SwitchAction.CANCEL and d.reason.code is ReasonCode.SWITCH_CANCELLED
    assert st.phase is SwitchPhase.STEADY and st.active_profile == "day"


def test_canary_holds_then_moves_all() -> None:
    st = to_canary(p99=1.0)
    d, st, _ = step(st, utc(20, 15), p99=1.15)      # +15%: inside the 20% limit
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_HOLD
    d, st, ev = step(st, utc(20, 30), p99=1.1)
    assert d.action is SwitchAction.MOVE_ALL and d.reason.code is ReasonCode.SWITCH_COMPLETE
    assert st.phase is SwitchPhase.STEADY and st.active_profile == "night"
    assert ev and ev[0].kind == "info"
    d, st, _ = step(st, utc(21, 0))
    assert d.action is SwitchAction.NONE and d.reason.code is ReasonCode.SWITCH_STEADY


def test_canary_rolls_back_on_p99_regression_with_alert() -> None:
    st = to_canary(p99=1.0)
    d, st, ev = step(st, utc(20, 10), p99=1.25)
    assert d.action is SwitchAction.ROLLBACK and d.reason.code is ReasonCode.SWITCH_ROLLBACK_P99
    assert d.to_profile == "day" and d.from_profile == "day"
    assert st.phase is SwitchPhase.PAUSED and st.active_profile == "day" and st.blocked_profile == "night"
    assert len(ev) == 1 and ev[0].kind == "alert" and "25%" in ev[0].reason.text
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


def test_canary_rolled_back_without_alert_when_ask_ends_during_hold() -> None:
    cfg = replace(CFG, windows=(ScheduleWindow("night", time(22, 0), time(22, 10)),))
    _, st, _ = step(SwitchState(), utc(19, 30), cfg=cfg)
    d, st, _ = step(st, utc(20, 0), cfg=cfg)
    assert st.phase is SwitchPhase.CANARY
    d, st, ev = step(st, utc(20, 10), cfg=cfg)
    assert d.action is SwitchAction.ROLLBACK and d.reason.code is ReasonCode.SWITCH_CANCELLED and not ev
    assert st.phase is SwitchPhase.STEADY and st.active_profile == "day"


def test_morning_switch_runs_in_reverse() -> None:
    st = SwitchState(active_profile="night")
    d, st, _ = step(st, utc(4, 29, day=18))          # 06:29 Berlin
    assert d.action is SwitchAction.NONE
    d, st, _ = step(st, utc(4, 30, day=18))
    assert d.action is SwitchAction.PREWARM and d.to_profile == "day"
    d, st, _ = step(st, utc(5, 0, day=18))
    assert d.action is SwitchAction.MOVE_CANARY and d.to_profile == "day"
    d, st, _ = step(st, utc(5, 30, day=18))
    assert d.action is SwitchAction.MOVE_ALL and st.active_profile == "day"


def test_every_transition_is_recorded_with_reason() -> None:
    st = to_canary()
    _, st, _ = step(st, utc(20, 30))
    phases = [(t.from_phase, t.to_phase) for t in st.transitions]
    assert phases == [(SwitchPhase.STEADY, SwitchPhase.PREWARM), (SwitchPhase.PREWARM, SwitchPhase.CANARY),
                      (SwitchPhase.CANARY, SwitchPhase.STEADY)]
    assert all(t.reason.text for t in st.transitions)
    assert [t.at for t in st.transitions] == [utc(19, 30), utc(20, 0), utc(20, 30)]


def test_without_p99_the_switch_proceeds_and_says_so() -> None:
    st = SwitchState()
    _, st, _ = step(st, utc(19, 30), p99=None)
    d, st, _ = step(st, utc(20, 0), p99=None)
    assert d.action is SwitchAction.MOVE_CANARY and d.reason.code is ReasonCode.SWITCH_NO_P99
    d, st, _ = step(st, utc(20, 10), p99=None)
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
