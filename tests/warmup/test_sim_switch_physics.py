"""Issue 26, switch physics: a simulated profile switch sees and costs what a live one would.

The real decision core (``ProfilePolicy``) runs over the simulator's profile pools with a calibrated
TTFT curve per profile (``warmup.sim.mixed_latency``): under round robin the canary gets its share of
the ready replicas, each profile's TTFT comes from its own curve at its load, and the tick reads the
minute's P99s as a scrape would.  A night profile whose TTFT is 25% worse than day's is rolled back at
the canary, paused for the window, and the report says what the rollback cost; the same night with
day's curve completes.  Before issue 26 the simulator gave the breaker no P99 (``p99_latency_s=None``)
and ran the target's whole need beside 90% of the old side.
"""
from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

import numpy as np
import pytest

from warmup.core import CoreConfig, ScalingConfig, ScheduleWindow, SwitchConfig
from warmup.core.state import SwitchPhase
from warmup.sim.fleet import FleetParams, switch_columns
from warmup.sim.latency import LatencyCurve
from warmup.sim.mixed_latency import minute_latency, mixture_quantile
from warmup.sim.loop import run_online
from warmup.sim.switches import ProfilePolicy

T0 = datetime(2024, 5, 14, 19, 0, tzinfo=timezone.utc)
MINUTES, DEMAND_RPM, STEPS = 150, 600.0, 6
P = FleetParams(capacity_rpm=60.0, cold_start_min=3.0, wait_threshold_s=0.9)
RATES = (0.2, 0.5, 1.0)          # req/s per replica; 1.0 is the calibrated capacity (60 req/min)


def curve(slower: float = 1.0) -> LatencyCurve:
    """A calibration's curve; ``slower`` scales every percentile (1.25: a profile 25% worse)."""
    p99 = tuple(x * slower for x in (400.0, 500.0, 800.0))
    shape = tuple((x * slower * 0.4, x * slower * 0.8) for x in (400.0, 500.0, 800.0))
    return LatencyCurve(tuple(zip(RATES, p99)), 1.0, 1000.0, "test", shape=shape)


def policy() -> ProfilePolicy:
    sw = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", 60.0), ("night", 60.0)),
                      windows=(ScheduleWindow("night", time(20, 0), time(6, 0)),), prewarm_min=3.0,
                      canary_share=0.1, hold_min=30.0, settle_min=10.0, rollback_p99_rise=0.2)
    cfg = CoreConfig(scaling=ScalingConfig(capacity_rpm=60.0, min_replicas=1, max_replicas=40, cold_start_min=3.0,
                                           stabilisation_s=600.0), switch=sw)
    times = [T0 + timedelta(minutes=m) for m in range(MINUTES)]
    return ProfilePolicy(cfg, times, (), None)


def run(night: LatencyCurve):
    pol = policy()
    arrivals = np.full((MINUTES, STEPS), DEMAND_RPM / STEPS)
    r = run_online(pol, arrivals, DEMAND_RPM, P, initial_ready=10, curves={"day": curve(), "night": night})
    return pol, r


def test_a_target_25_percent_slower_rolls_back_at_the_canary_with_its_cost() -> None:
    pol, r = run(curve(1.25))
    steps = [(t.from_phase, t.to_phase) for t in pol.state.switch.transitions]
    assert steps[:4] == [(SwitchPhase.STEADY, SwitchPhase.PREWARM), (SwitchPhase.PREWARM, SwitchPhase.CANARY),
                         (SwitchPhase.CANARY, SwitchPhase.ROLLBACK), (SwitchPhase.ROLLBACK, SwitchPhase.PAUSED)]
    trip = pol.state.switch.transitions[2]
    assert "during the canary" in trip.reason.text and "25% above" in trip.reason.text
    assert (trip.at - T0) < timedelta(minutes=65)                 # within minutes of the canary, not the hold's 30
    assert pol.state.switch.phase is SwitchPhase.PAUSED and pol.state.switch.active_profile == "day"
    cost = switch_columns(r, P.gpus_per_replica)
    assert cost["switch_minutes"] > 0 and cost["switch_gpu_hours"] > 0      # the canary's replica, pre-warmed
    assert cost["late_during_switches"] > 0                                  # its slower requests
    assert r.latency_late is not None and r.ttft_p99_ms is not None


def test_the_same_switch_with_a_target_as_fast_completes_and_the_canary_takes_its_share() -> None:
    pol, r = run(curve(1.0))
    assert pol.state.switch.active_profile == "night" and pol.state.switch.blocked_profile == ""
    canary = [t for t in pol.state.switch.transitions if t.to_phase is SwitchPhase.CANARY][0]
    moved = [t for t in pol.state.switch.transitions if t.to_phase is SwitchPhase.MOVE][0]
    assert moved.at - canary.at == timedelta(minutes=30)                       # the whole hold
    m = int((canary.at - T0).total_seconds() // 60) + 1
    share = 1.0 / r.ready[m]       # one night replica among the ready ones: round robin's share
    assert r.ready[m] >= 10 and share == pytest.approx(0.1, abs=0.02)


def test_a_canary_barely_moves_the_fleets_p99_so_the_breaker_reads_the_targets_own() -> None:
    day, night = curve(), curve(1.25)
    alone = minute_latency({"day": day}, {"day": 10}, 600.0, 0.0, 0.0, 5.0)
    mixed = minute_latency({"day": day, "night": night}, {"day": 9, "night": 1}, 600.0, 0.0, 0.0, 5.0)
    own = dict(mixed.p99_by_profile)
    assert own["night"] == pytest.approx(1.25 * own["day"]) and own["day"] == pytest.approx(alone.fleet_p99_s)
    assert alone.fleet_p99_s < mixed.fleet_p99_s < 1.2 * alone.fleet_p99_s   # under the 20% limit
    law = (320.0, 640.0, 800.0)
    assert mixture_quantile([(1.0, law)]) == pytest.approx(800.0, rel=1e-6)
