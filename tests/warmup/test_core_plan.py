"""The replica plan (``plan_replicas``): one peak-over-lead arithmetic with the live decision."""
from __future__ import annotations

from dataclasses import replace
from datetime import time

from wu_helpers import T0, flat_forecast, fleet, minutes
from warmup.core import CoreConfig, PolicyState, ScalingConfig, ScheduleWindow, SwitchConfig, decide_scale, plan_replicas

SCALING = ScalingConfig(capacity_rpm=300, min_replicas=1, max_replicas=40, cold_start_min=10, quantile=0.9)
CFG = CoreConfig(scaling=SCALING)
# T0 is 10:00 UTC; the night profile (half the capacity) runs 10:05-06:00
NIGHT = replace(CFG, switch=SwitchConfig(enabled=True, default_profile="day",
                                         profile_capacity=(("day", 300.0), ("night", 150.0)),
                                         windows=(ScheduleWindow("night", time(10, 5), time(6, 0)),)))


def test_first_step_is_the_live_decisions_need() -> None:
    path = [900.0 + 30 * i for i in range(30)]
    fc = flat_forecast(path, origin=T0 - minutes(2), spread=0.0)
    for obs in (600.0, 6000.0):  # forecast-driven, then the reactive floor
        dec, _ = decide_scale(SCALING, T0, fleet(1), obs, 0.0, fc, PolicyState())
        step = plan_replicas(CFG, fc, T0, obs)[0]
        assert step.desired == dec.desired == dec.raw, (obs, step.reason)
    assert "floor above the forecast" in plan_replicas(CFG, fc, T0, 6000.0)[0].reason


def test_the_window_never_shrinks_near_the_horizon() -> None:
    path = [300.0] * 29 + [3000.0]  # a spike at the forecast's last minute
    plan = plan_replicas(CFG, flat_forecast(path, spread=0.0), T0)
    assert len(plan) == 30 - 10  # minutes whose whole 10-min lead the forecast covers
    assert [p.desired for p in plan] == [1] * 19 + [10]
    assert plan[-1].peak_in_min == 10 and plan[-1].demand_rpm == 3000.0


def test_reactive_floor_holds_the_present_minute_only() -> None:
    plan = plan_replicas(CFG, flat_forecast(300.0, spread=0.0), T0, observed_rpm=1500.0, queue_depth=0.0)
    assert plan[0].desired == 5 and all(p.desired == 1 for p in plan[1:])
    assert [stage for stage, _ in plan[0].reasons] == ["profile", "forecast", "reactive_floor", "bounds"]


def test_each_minute_uses_the_profile_the_schedule_makes_active() -> None:
    plan = plan_replicas(NIGHT, flat_forecast(600.0, spread=0.0), T0)
    assert [p.profile for p in plan[:7]] == ["day"] * 5 + ["night"] * 2
    assert [p.desired for p in plan[:7]] == [2] * 5 + [4] * 2
    assert "schedule window night" in plan[5].reason


def test_no_forecast_plans_the_present_minute_reactively() -> None:
    plan = plan_replicas(CFG, flat_forecast(600.0, origin=T0 - minutes(20)), T0, observed_rpm=900.0)
    assert len(plan) == 1 and plan[0].desired == 3 and plan[0].demand_rpm is None
    assert "min old" in plan[0].reason
    unknown = plan_replicas(CFG, None, T0)[0]
    assert unknown.desired == SCALING.min_replicas and "current load unknown" in unknown.reason
