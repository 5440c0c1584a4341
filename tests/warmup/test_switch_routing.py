"""Issue 42, switch physics without calibrations and the canary's share where traffic is routed.

The real core (``ProfilePolicy``) over the simulator's profile pools, with NO calibration: every profile
is read on the documented default latency curve at its declared capacity (``latency.default_curve``),
so the breaker sees a P99 (before, it saw none and let every switch through).  Under round robin a
night profile that serves 40% less per replica than day gets as many requests per replica as day's:
its canary replica runs past its capacity and the breaker rolls the switch back.  Behind a weighted
route the canary gets its weight's share (10% +/- 2 points, from one replica up) and the same switch
completes; under round robin the report states the share the canary really had.
"""
from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

import numpy as np
import pytest

from warmup.core import CoreConfig, ScalingConfig, ScheduleWindow, SwitchConfig
from warmup.core.state import SwitchPhase
from warmup.sim.fleet import FleetParams, switch_columns
from warmup.sim.latency import default_curve, with_default_curves
from warmup.sim.loop import run_online
from warmup.sim.switches import ProfilePolicy

T0 = datetime(2024, 5, 14, 19, 0, tzinfo=timezone.utc)
MINUTES, STEPS = 150, 6
DAY, NIGHT = 300.0, 180.0          # night serves 40% less per replica
P = FleetParams(capacity_rpm=DAY, cold_start_min=3.0, wait_threshold_s=5.0)


def run(routing: str, demand: float):
    sw = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", DAY), ("night", NIGHT)),
                      windows=(ScheduleWindow("night", time(20, 0), time(6, 0)),), prewarm_min=3.0,
                      canary_share=0.1, hold_min=30.0, settle_min=10.0, rollback_p99_rise=0.2, routing=routing)
    cfg = CoreConfig(scaling=ScalingConfig(capacity_rpm=DAY, min_replicas=1, max_replicas=60, cold_start_min=3.0,
                                           stabilisation_s=600.0, target_utilisation=0.85), switch=sw)
    pol = ProfilePolicy(cfg, [T0 + timedelta(minutes=m) for m in range(MINUTES)], (), None)
    curves = with_default_curves({}, dict(sw.profile_capacity), 5000.0)   # no calibration given
    arrivals = np.full((MINUTES, STEPS), demand / STEPS)
    r = run_online(pol, arrivals, demand, P, initial_ready=int(np.ceil(demand / DAY / 0.85)), curves=curves)
    return pol, r


def phases(pol) -> list[SwitchPhase]:
    return [t.to_phase for t in pol.state.switch.transitions]


def test_without_calibrations_round_robin_overloads_the_slower_canary_and_the_breaker_rolls_back() -> None:
    pol, r = run("replicas", 2400.0)
    assert SwitchPhase.ROLLBACK in phases(pol), phases(pol)
    trip = next(t for t in pol.state.switch.transitions if t.to_phase is SwitchPhase.ROLLBACK)
    assert "during the canary" in trip.reason.text
    assert pol.state.switch.active_profile == "day"
    assert r.ttft_p99_ms is not None and np.isfinite(r.ttft_p99_ms).any()


@pytest.mark.parametrize("demand", [250.0, 600.0, 2400.0, 6000.0])   # from 1 canary replica up
def test_behind_a_weighted_route_the_canary_carries_its_share_and_the_switch_completes(demand) -> None:
    pol, r = run("weights", demand)
    assert pol.state.switch.active_profile == "night", phases(pol)
    cols = switch_columns(r, 1)
    assert cols["canary_request_share"] == pytest.approx(0.10, abs=0.02)
    assert cols["canary_request_share_max"] <= 0.12


def test_under_round_robin_the_report_states_the_share_the_canary_really_had() -> None:
    pol, r = run("replicas", 250.0)                       # two day replicas and one canary: a third, not 10%
    cols = switch_columns(r, 1)
    assert cols["canary_request_share"] == pytest.approx(1 / 3, abs=0.01)
    canary = next(t for t in pol.state.switch.transitions if t.to_phase is SwitchPhase.CANARY)
    assert "round robin sends the canary 33% of requests" in canary.reason.text, canary.reason.text
    assert "not the 10% asked" in canary.reason.text


def test_the_default_curve_rises_with_utilisation_and_a_calibration_replaces_it() -> None:
    c = default_curve(300.0, 1000.0, "day")
    p99 = [p for _, p in c.points]
    assert p99 == sorted(p99) and p99[-1] > 10 * p99[0] and c.bound_source.startswith("default curve")
    mine = default_curve(60.0, 500.0, "night")
    both = with_default_curves({"night": mine}, {"day": 300.0, "night": 180.0}, 1000.0)
    assert both["night"] is mine and both["day"].scenario == "default"


def test_warmups_in_the_profile_loop_take_serving_capacity() -> None:
    """Issue 42: the profile loop charged warmups nothing (60 started, 0 requests charged on the Azure
    10 s trace).  A jump in demand queues requests, the tiered warmups start, and their requests are
    taken from serving capacity in the minute their targets are ready, as in the single-profile loop."""
    from warmup.sim.warmups import WarmupCharges

    sw = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", DAY), ("night", NIGHT)),
                      windows=(ScheduleWindow("night", time(20, 0), time(6, 0)),), prewarm_min=3.0, routing="weights")
    cfg = CoreConfig(scaling=ScalingConfig(capacity_rpm=DAY, min_replicas=1, max_replicas=60, cold_start_min=3.0),
                     switch=sw)
    pol = ProfilePolicy(cfg, [T0 + timedelta(minutes=m) for m in range(90)], (), None)
    demand = np.r_[np.full(30, 600.0), np.full(60, 3000.0)]
    r = run_online(pol, np.repeat(demand[:, None] / STEPS, STEPS, axis=1), 600.0, P, initial_ready=3)
    assert pol.warmups > 0 and r.warmup_requests is not None and r.warmup_requests.sum() > 0
    charges = WarmupCharges()                       # a profile's booting instance, by its own pool's index
    charges.start(10, 4.0, ("night-b1", "day-r0"), 120.0)
    assert charges.take(10, {"night": [30, 11], "day": []}) == 4.0 and charges.take(11, {}) == 4.0
