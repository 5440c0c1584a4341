"""The live context mix in the switch decision and in the loop's bookkeeping: a sustained long-context
share starts the same safe switch a schedule window does; the round's prompts are counted per instance."""
from __future__ import annotations

import math
from datetime import datetime, time, timedelta, timezone

import pytest

from wu_helpers import fleet
from warmcast.config.deployments import parse_deployments
from warmcast.errors import InputError
from warmup.actuators.metrics import Histogram
from warmup.core.adapters import core_config
from warmup.core import ScheduleWindow, SwitchAction, SwitchConfig, SwitchPhase, SwitchState, decide_switch
from warmup.core.mix_trigger import MixTriggerConfig, decide_mix
from workers.mix import round_mix

CFG = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", 300.0), ("night", 200.0)),
                   windows=(ScheduleWindow("night", time(22, 0), time(7, 0)),))
NOON = datetime(2024, 5, 17, 12, 0, tzinfo=timezone.utc)
MIX = MixTriggerConfig(profile="night", long_tokens=4096, share=0.3, sustain_min=10)


def _mix_at(now: datetime, shares: list[float]):
    series = [(now - timedelta(minutes=len(shares) - i), v) for i, v in enumerate(shares)]
    return decide_mix(MIX, series, now)


def test_a_sustained_long_mix_at_noon_starts_the_switch_the_clock_would_not():
    ask = _mix_at(NOON, [0.6] * 12)
    d, st, _ = decide_switch(CFG, NOON, fleet(10), 1.0, None, SwitchState(), 10, "day", mix=ask)
    assert d.action is SwitchAction.PREWARM and d.to_profile == "night" and "mix asks for night" in str(d.reason)
    ready = fleet(10, profile="day") + fleet(15, profile="night")   # night's whole need pre-warmed and ready
    d, st, _ = decide_switch(CFG, NOON + timedelta(minutes=1), ready, 1.0, None, st, 10, "day", mix=ask)
    assert d.action is SwitchAction.MOVE_CANARY and st.phase is SwitchPhase.CANARY  # same canary and breaker


def test_the_mix_falling_back_lets_the_clock_decide_again():
    ask = _mix_at(NOON, [0.6] * 12)
    _, st, _ = decide_switch(CFG, NOON, fleet(10), 1.0, None, SwitchState(), 10, "day", mix=ask)
    quiet = _mix_at(NOON + timedelta(minutes=20), [0.6] * 12 + [0.1] * 10)
    assert quiet.profile == ""
    d, st, _ = decide_switch(CFG, NOON + timedelta(minutes=20), fleet(10), 1.0, None, st, 10, "day", mix=quiet)
    assert d.action is SwitchAction.CANCEL and st.phase is SwitchPhase.STEADY
    d, _, _ = decide_switch(CFG, NOON, fleet(10), 1.0, None, SwitchState(), 10, "day", mix=None)
    assert d.action is SwitchAction.NONE  # without the mix, noon is day


def _h(counts: list[float]) -> Histogram:
    bounds = (1000.0, 5000.0, math.inf)
    return Histogram(tuple(zip(bounds, counts)), counts[-1], 0.0)


def test_round_mix_counts_each_instance_against_its_own_previous_reading():
    first, carry = round_mix(None, {"a": _h([5, 8, 10]), "b": None}, 5000, 120.0)
    assert (first["long"], first["total"], first["minute"]) == (0.0, 0.0, 2)  # first sight: baseline only
    got, carry = round_mix(carry, {"a": _h([6, 10, 14]), "b": _h([1, 1, 1])}, 5000, 180.0)
    assert (got["long"], got["total"]) == (2.0, 4.0) and set(carry) == {"a", "b"}  # b's first reading: baseline
    restarted, _ = round_mix(carry, {"a": _h([1, 1, 3]), "b": None}, 5000, 240.0)
    assert (restarted["long"], restarted["total"]) == (2.0, 3.0)  # a reset: its whole histogram is new


def _file(mix: str) -> dict:
    return {"deployments": [{"name": "d", "profiles": {"day": {"capacity_rpm": 60}, "night": {"capacity_rpm": 30}},
                             "schedule": {"mix_trigger": mix}}]}


def test_mix_trigger_in_the_deployments_file_enables_switching_and_is_checked():
    dep = parse_deployments(_file({"profile": "night", "long_tokens": 4096, "share": 0.3, "sustain_min": 10})).get("d")
    assert dep.schedule.mix_trigger.sustain_min == 10 and core_config(dep).switch.enabled
    with pytest.raises(InputError, match="mix_trigger profile 'evening' is not one of profiles"):
        parse_deployments(_file({"profile": "evening"}))
    with pytest.raises(InputError, match="deployment d: schedule.mix_trigger.share"):
        parse_deployments(_file({"profile": "night", "share": 1.5}))


def test_a_schedule_window_naming_an_unknown_profile_is_refused_naming_the_key():
    """Issue 26: a switch schedule that names a profile the deployment lacks (a typo) is refused before
    anything is simulated or scaled, with the key that names it."""
    doc = _file({"profile": "night"})
    doc["deployments"][0]["schedule"] = {"windows": [{"profile": "night", "start": "20:00", "end": "06:00"},
                                                     {"profile": "nigth", "start": "12:00", "end": "13:00"}]}
    with pytest.raises(InputError, match=r"schedule.windows\[1\].profile 'nigth' is not one of profiles "
                                         r"\['day', 'night'\]"):
        parse_deployments(doc)
