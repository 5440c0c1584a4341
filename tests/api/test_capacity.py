"""The capacity planner is a pure function: checked against hand-computed answers."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from warmcast.errors import InputError
from warmup.planning.capacity import CapacityRequest, capacity_plan


def _flat_by_hour(days: int) -> pd.Series:
    """Load = 100 * (hour of day) rpm, constant within each hour."""
    idx = pd.date_range("2024-01-01", periods=days * 1440, freq="min")
    return pd.Series(100.0 * idx.hour, index=idx)


def test_replicas_follow_the_daily_profile():
    hist = _flat_by_hour(3)
    req = CapacityRequest(start=pd.Timestamp("2024-01-04"), span="day", quantile=0.9, utilisation=0.5,
                          capacity_per_instance=100)
    plan = capacity_plan(hist, req)
    assert len(plan.hours) == 24
    for h, row in enumerate(plan.hours):
        assert row.demand_rpm == pytest.approx(100 * h)
        assert row.replicas == math.ceil(100 * h / 50)  # capacity 100 at 50% utilisation
        assert row.gpu_hours == row.replicas
    assert plan.gpu_hours == sum(math.ceil(2 * h) for h in range(24))
    assert plan.peak_replicas == 46
    assert "day" in plan.method and plan.notes  # less than two weeks: says the weekly pattern is unused


def test_week_uses_the_weekly_pattern_with_two_weeks_of_history():
    idx = pd.date_range("2024-01-01", periods=21 * 1440, freq="min")  # 2024-01-01 is a Monday
    hist = pd.Series(np.where(idx.day_of_week >= 5, 10.0, 1000.0), index=idx)
    req = CapacityRequest(start=pd.Timestamp("2024-01-22"), span="week", capacity_per_instance=100, utilisation=1.0)
    plan = capacity_plan(hist, req)
    assert len(plan.hours) == 168 and "week" in plan.method
    weekday = [h.replicas for h in plan.hours if h.start.day_of_week < 5]
    weekend = [h.replicas for h in plan.hours if h.start.day_of_week >= 5]
    assert set(weekday) == {10} and set(weekend) == {1}


def test_quantile_bounds_gpus_and_forecast_override():
    rng = np.random.default_rng(1)
    idx = pd.date_range("2024-01-01", periods=4 * 1440, freq="min")
    hist = pd.Series(rng.uniform(0, 1000, len(idx)), index=idx)
    lo = capacity_plan(hist, CapacityRequest(start=pd.Timestamp("2024-01-05"), quantile=0.5, capacity_per_instance=100,
                                             utilisation=1.0))
    hi = capacity_plan(hist, CapacityRequest(start=pd.Timestamp("2024-01-05"), quantile=0.95, capacity_per_instance=100,
                                             utilisation=1.0, gpus_per_replica=2, min_replicas=3, max_replicas=9))
    assert all(a.replicas <= 10 for a in lo.hours)
    assert all(3 <= b.replicas <= 9 for b in hi.hours)
    assert hi.gpu_hours == 2 * sum(b.replicas for b in hi.hours)
    # a forecast above the profile for the first hour wins there, and says so
    fi = pd.date_range("2024-01-05", periods=30, freq="min")
    fp = np.full(30, 5000.0)
    plan = capacity_plan(hist, CapacityRequest(start=pd.Timestamp("2024-01-05"), capacity_per_instance=100,
                                               utilisation=1.0), fi, fp, fp)
    assert plan.hours[0].source == "forecast" and plan.hours[0].replicas == 50
    assert plan.hours[1].source == "profile"


def test_missing_minutes_are_ignored_not_zero():
    hist = _flat_by_hour(2)
    hist[hist.index.hour == 5] = np.nan  # a gap: no data for 05:00 on both days
    plan = capacity_plan(hist, CapacityRequest(start=pd.Timestamp("2024-01-03"), capacity_per_instance=100,
                                               utilisation=1.0, min_replicas=1))
    assert plan.hours[5].source == "no-history" and plan.hours[5].replicas == 1
    assert plan.hours[6].demand_rpm == pytest.approx(600)


@pytest.mark.parametrize("kw, field", [({"quantile": 1.0}, "quantile"), ({"utilisation": 0}, "utilisation"),
                                        ({"capacity_per_instance": -1}, "capacity_per_instance"),
                                        ({"span": "month"}, "span"), ({"min_replicas": 5, "max_replicas": 2}, "max_replicas")])
def test_bad_requests_name_the_field(kw, field):
    with pytest.raises(InputError, match=field):
        capacity_plan(_flat_by_hour(1), CapacityRequest(start=pd.Timestamp("2024-01-02"), **kw))


def test_each_hour_uses_the_profile_the_core_makes_active():
    """With the deployment's core config, an hour divides by its scheduled profile's capacity (the
    core's profile stage at each of its minutes); an hour a window starts in takes the smaller one."""
    from datetime import time

    from warmcast.config.deployments import Schedule, ScheduleWindow, demo_deployment
    from warmup.core.adapters import core_config
    from warmup.core.plan import stage_profile

    dep = demo_deployment().model_copy(update={"schedule": Schedule(
        timezone="Europe/Paris", windows=[ScheduleWindow(profile="night", start=time(22, 30), end=time(7, 0))])})
    cfg = core_config(dep)  # day 300 rpm, night 200 rpm from 22:30 to 07:00 Paris time (UTC+1 in January)
    hist = pd.Series(600.0, index=pd.date_range("2024-01-01", periods=3 * 1440, freq="min"))
    plan = capacity_plan(hist, CapacityRequest(start=pd.Timestamp("2024-01-04"), utilisation=1.0, core=cfg))
    by_hour = {h.start.hour: h for h in plan.hours}
    assert (by_hour[3].profile, by_hour[3].capacity_rpm, by_hour[3].replicas) == ("night", 200.0, 3)
    assert (by_hour[12].profile, by_hour[12].capacity_rpm, by_hour[12].replicas) == ("day", 300.0, 2)
    assert (by_hour[21].profile, by_hour[21].capacity_rpm, by_hour[21].replicas) == ("day+night", 200.0, 3)  # 22:30 Paris
    assert (by_hour[6].profile, by_hour[6].capacity_rpm) == ("day", 300.0)  # 07:00 Paris: night has ended
    for h in plan.hours:  # the core's own answer at the hour's minutes
        at = h.start.tz_localize("UTC").to_pydatetime()
        assert h.capacity_rpm == min(stage_profile(cfg, at + pd.Timedelta(minutes=m))[1] for m in range(60))
    fixed = capacity_plan(hist, CapacityRequest(start=pd.Timestamp("2024-01-04"), utilisation=1.0,
                                                capacity_per_instance=300))
    assert {(h.capacity_rpm, h.profile) for h in fixed.hours} == {(300.0, "")}  # no core config: one capacity
