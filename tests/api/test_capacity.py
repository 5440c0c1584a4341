"""The capacity planner is a pure function: checked against hand-computed answers."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from warmcast.errors import InputError
from warmup.capacity import CapacityRequest, capacity_plan


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
