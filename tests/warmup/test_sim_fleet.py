"""The fleet model: the fluid FIFO queue, cold starts, scale-in order, the oracle plan."""
from __future__ import annotations

import math

import numpy as np
import pytest

from warmup.sim.fleet import FleetParams, Observation, run_online, run_plan, serve_minutes, serve_step, summarise
from warmup.sim.policies import QueueKEDA, ReactiveHPA, oracle_need, oracle_plan

P = FleetParams(capacity_rpm=60.0, cold_start_min=3)   # 1 request/s per instance


def test_serve_step_enough_capacity_no_wait() -> None:
    q, late, mw = serve_step(0.0, 50.0, 10.0, 10.0, 5.0)
    assert (q, late, mw) == (0.0, 0.0, 0.0)


def test_serve_step_overload_late_share_is_exact() -> None:
    # 20/s arriving, 10/s served for 10 s: backlog grows 10/s; wait > 5 s once backlog > 50, i.e. after 5 s.
    q, late, mw = serve_step(0.0, 200.0, 10.0, 10.0, 5.0)
    assert q == pytest.approx(100.0)
    assert late == pytest.approx(100.0)       # arrivals in the last 5 s
    assert mw == pytest.approx(10.0)


def test_serve_step_draining_backlog() -> None:
    # Backlog 100 (10 s of work), 5/s arriving, 10/s served: backlog falls 5/s, above 50 for 10 s.
    q, late, _ = serve_step(100.0, 50.0, 10.0, 10.0, 5.0)
    assert q == pytest.approx(50.0) and late == pytest.approx(50.0)


def test_serve_step_no_capacity_everyone_late() -> None:
    q, late, mw = serve_step(3.0, 7.0, 0.0, 10.0, 5.0)
    assert (q, late) == (10.0, 7.0) and math.isinf(mw)


def test_short_burst_is_absorbed_by_the_queue() -> None:
    # One minute 5% over capacity leaves a 3 s backlog: nobody waits 5 s.
    arr = np.array([[63.0], [50.0]])
    late, queue, mw = serve_minutes(np.array([1, 1]), arr, P)
    assert late.sum() == 0 and mw.max() == pytest.approx(3.0)


class Fixed:
    name = "fixed"

    def __init__(self, plan):
        self.plan = plan
        self.seen: list[Observation] = []

    def decide(self, obs):
        self.seen.append(obs)
        return self.plan[obs.t]


def test_cold_start_delays_readiness_and_booting_costs() -> None:
    pol = Fixed([3, 3, 3, 3, 3, 3])
    run = run_online(pol, np.zeros((6, 1)), 0.0, P, initial_ready=1)
    assert run.provisioned.tolist() == [3] * 6
    assert run.ready.tolist() == [1, 1, 1, 3, 3, 3]
    assert run.launches == 2
    assert pol.seen[3].ready == 3 and pol.seen[2].booting == 2


def test_scale_in_removes_booting_first() -> None:
    pol = Fixed([3, 1, 1])
    run = run_online(pol, np.zeros((3, 1)), 0.0, P, initial_ready=1)
    assert run.ready.tolist() == [1, 1, 1] and run.provisioned.tolist() == [3, 1, 1]


def test_observation_is_from_before_the_minute() -> None:
    arr = np.array([[10.0], [20.0], [30.0]])
    pol = Fixed([5, 5, 5])
    run_online(pol, arr, 7.0, P, initial_ready=5)
    assert [o.last_minute_rpm for o in pol.seen] == [7.0, 10.0, 20.0]


def test_oracle_plan_is_ready_when_needed_and_bridges_short_gaps() -> None:
    need = np.array([1, 1, 2, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 3, 1])
    prov, ready = oracle_plan(need, cold_start_min=3)
    assert (ready >= need).all()
    # Slot 2 is needed at 2-3 and again at 9 (gap 5 > 3): two launches; it boots 3 minutes before 9.
    assert ready[4:9].tolist() == [1] * 5 and prov[6:9].tolist() == [2, 2, 2]
    # Short gap: slot 2 needed at 9 and 16 (gap 6 > 3) -> separate; slot 3 needed once at 16.
    assert ready[16] == 3 and prov[13:16].tolist() == [3, 3, 3]
    # A gap no longer than the cold start is bridged.
    prov2, ready2 = oracle_plan(np.array([2, 1, 1, 2]), 3)
    assert ready2.tolist() == [2, 2, 2, 2] and prov2.tolist() == [2, 2, 2, 2]


def test_oracle_need_respects_min_and_nan() -> None:
    assert oracle_need(np.array([0.0, 59.0, 61.0, np.nan]), 60.0, 1).tolist() == [1, 1, 2, 1]


def test_summary_counts_gpu_hours_and_shortfalls() -> None:
    prov = np.array([2, 2, 3])
    run = run_plan("x", prov, np.array([2, 2, 2]), np.array([[100.0], [130.0], [0.0]]), P)
    row = summarise(run, np.array([100.0, 130.0, 0.0]), P, oracle_gpu_hours=7 / 60)
    assert row["gpu_hours"] == pytest.approx(7 / 60, abs=1e-3) and row["gpu_hours_vs_oracle"] == 1.0
    assert row["minutes_short"] == 1 and row["scale_actions"] == 1


def test_reactive_hpa_scales_up_at_once_and_down_after_stabilisation() -> None:
    hpa = ReactiveHPA(capacity_rpm=60.0, target_utilisation=0.5, stabilisation_min=3)
    obs = lambda t, rpm, prov: Observation(t, rpm, 0.0, prov, 0, 0.0)
    assert hpa.decide(obs(0, 300.0, 2)) == 10
    assert hpa.decide(obs(1, 60.0, 10)) == 10      # recent high holds
    assert hpa.decide(obs(2, 60.0, 10)) == 10
    assert hpa.decide(obs(3, 60.0, 10)) == 2       # the 300 rpm minute left the 3-minute window


def test_queue_keda_adds_on_backlog_and_scales_in_after_cooldown() -> None:
    k = QueueKEDA(capacity_rpm=60.0, target_waiting=5, drain_min=1.0, cooldown_min=2)
    assert k.decide(Observation(0, 60.0, 120.0, 2, 0, 0.0)) == 3      # 60 rpm + 120 queued over 1 min -> 3
    assert k.decide(Observation(1, 60.0, 120.0, 2, 1, 0.0)) == 3      # booting ones count: no more
    assert k.decide(Observation(2, 60.0, 0.0, 3, 0, 0.0)) == 3        # queue empty for 1 minute
    assert k.decide(Observation(3, 60.0, 0.0, 3, 0, 0.0)) == 2        # 2 minutes: to 60 / (60 * 0.8) -> 2
    assert k.decide(Observation(4, 60.0, 3.0, 2, 0, 0.0)) == 2        # a small queue: hold
