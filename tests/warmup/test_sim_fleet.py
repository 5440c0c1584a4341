"""The fleet model: the fluid FIFO queue, cold starts, scale-in order, the oracle plan."""
from __future__ import annotations

import math

import numpy as np
import pytest

from warmup.sim.fleet import FleetParams, Observation, run_plan, serve_minutes, serve_step, summarise
from warmup.sim.loop import run_online
from warmup.sim.autoscalers import HPARules, QueueKEDA, ReactiveHPA
from warmup.sim.policies import oracle_need, oracle_plan

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


def _obs(t: int, rpm: float, prov: int, queue: float = 0.0) -> Observation:
    return Observation(t, rpm, queue, prov, 0, 0.0)


def test_reactive_hpa_holds_within_the_documented_10_percent_tolerance() -> None:
    hpa = ReactiveHPA(capacity_rpm=60.0, target_utilisation=0.5)       # 30 rpm per pod
    assert hpa.decide(_obs(0, 10 * 30 * 1.09, 10)) == 10                # usage ratio 1.09: no change
    assert hpa.decide(_obs(1, 10 * 30 * 1.2, 10)) == 12                 # 1.2: ceil(360 / 30)


def test_reactive_hpa_scale_up_is_limited_to_100_percent_or_4_pods_per_15_s() -> None:
    hpa = ReactiveHPA(capacity_rpm=60.0, target_utilisation=0.5)
    assert hpa.decide(_obs(0, 3000.0, 2)) == 48      # 2 -> 6 -> 12 -> 24 -> 48 over the minute's four syncs
    assert hpa.decide(_obs(1, 3000.0, 48)) == 100    # 48 -> 96 -> 100: the recommendation


def test_reactive_hpa_scales_down_to_the_highest_of_the_stabilisation_window() -> None:
    hpa = ReactiveHPA(capacity_rpm=60.0, target_utilisation=0.5, stabilisation_min=3)
    assert hpa.decide(_obs(0, 300.0, 10)) == 10
    assert hpa.decide(_obs(1, 60.0, 10)) == 10      # the 300 rpm minute holds
    assert hpa.decide(_obs(2, 60.0, 10)) == 10
    assert hpa.decide(_obs(3, 60.0, 10)) == 2       # it left the 3-minute window


def test_hpa_rules_respect_bounds() -> None:
    rules = HPARules(min_replicas=2, max_replicas=20)
    assert rules.scale(10, 500) == 20 and rules.scale(20, 0) == 20     # the window still holds 500
    one = HPARules(min_replicas=2, down_window_min=1)   # minute 0's window holds the count it started from
    assert one.scale(10, 0) == 10 and one.scale(10, 0) == 2


def test_queue_keda_scales_on_waiting_requests_per_replica_through_the_hpa() -> None:
    k = QueueKEDA(capacity_rpm=60.0, target_waiting=5, stabilisation_min=2)
    assert k.decide(_obs(0, 60.0, 2, queue=120.0)) == 24     # ceil(120 / 5), reached within the minute
    assert k.decide(_obs(1, 60.0, 24, queue=0.0)) == 24      # the queue drained: the window holds 24
    assert k.decide(_obs(2, 60.0, 24, queue=0.0)) == 1       # then down to min_replicas: no queue, no need
    assert k.decide(_obs(3, 60.0, 1, queue=5.4)) == 1        # 5.4 per replica: within the tolerance


def test_queue_keda_activates_from_zero_and_returns_to_zero_after_its_cooldown() -> None:
    k = QueueKEDA(capacity_rpm=60.0, target_waiting=5, min_replicas=0, cooldown_min=3, stabilisation_min=1)
    assert k.decide(_obs(0, 0.0, 0, queue=0.0)) == 0
    assert k.decide(_obs(1, 30.0, 0, queue=12.0)) == 3       # activation: ceil(12 / 5)
    assert [k.decide(_obs(t, 0.0, 3)) for t in (2, 3, 4)] == [1, 1, 0]   # idle 3 minutes: to zero


class _WarmingFleet:
    """A fixed fleet whose warmup sends 120 requests per minute from minute 2 to 4 (a policy as the
    simulator calls it: ``decide`` and ``warmup_load``)."""

    name = "warming"

    def decide(self, obs: Observation) -> int:
        return 2

    def warmup_load(self, t: int, booting=()) -> float:
        return 120.0 if 2 <= t < 5 else 0.0


def test_warmup_requests_take_serving_capacity() -> None:
    # Issue 26: warmup requests used to cost no capacity. Two instances of 60 req/min carry 90 req/min;
    # while a warmup sends 120 req/min of its own, they serve none of the traffic and a backlog builds.
    from warmup.sim.loop import run_online

    params = FleetParams(capacity_rpm=60.0, cold_start_min=1.0, wait_threshold_s=5.0)
    arrivals = np.full((8, 1), 90.0)
    run = run_online(_WarmingFleet(), arrivals, 90.0, params, initial_ready=2)
    assert run.queue[1] == 0 and run.queue[2] == pytest.approx(90.0) and run.queue[4] == pytest.approx(270.0)
    assert run.late[2:5].sum() > 0 and run.queue[5] == pytest.approx(240.0)   # draining at 30 req/min after


def test_a_warmup_costs_its_targets_only_once_they_are_ready_and_only_before_its_deadline() -> None:
    """As the live sender does: a booting target is warmed in the minute it answers, within the
    warmup's duration; a ready one at once; one still booting at the deadline never."""
    from warmup.sim.warmups import WarmupCharges

    c = WarmupCharges()
    c.start(10, 6, ("b0", "b1", "b2", "r0", "x9"), duration_s=240.0)   # deadline: minute 14
    booting = [12, 13, 20]                                             # ready minutes, launch order
    assert c.take(10, booting) == 6.0                                  # r0 at once; nothing booting yet
    assert [c.take(t, booting) for t in (11, 12, 13, 14, 20)] == [0.0, 6.0, 6.0, 0.0, 0.0]
    c.start(30, 5, ("b0", "b1"), duration_s=60.0)
    assert c.take(30, [30, 31]) == 5.0 and c.take(31, [31]) == 0.0    # b1 ready after the one-minute deadline
