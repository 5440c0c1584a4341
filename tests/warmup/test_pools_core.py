"""Joint planning of hot and cold pools: hand-checked cases and properties over random loads."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from warmup.planning.pools import (ColdWork, JointInput, PoolShape, SharedLimits, cold_room, hot_stage, plan_joint)

HOT = PoolShape(capacity_rpm=10, utilisation=0.5, gpu_request=0.8, memory_gb=30)
COLD = PoolShape(capacity_rpm=2, utilisation=1.0, gpu_request=1.0, memory_gb=40)


def _inp(hot_rpm, queue=(), cold_rpm=(), deadline=2, limits=SharedLimits(8, 80), hot=HOT, cold=COLD):
    return JointInput(tuple(hot_rpm), tuple(queue), tuple(cold_rpm), deadline, 1.0, hot, cold, limits)


def test_cold_runs_at_the_least_steady_rate_that_meets_its_deadline():
    # 10 requests due by the end of step 2, 2 per instance-step: 10/3 per step -> 2 instances
    plans = plan_joint(_inp([0, 0, 0], [ColdWork(10, 2)]))
    assert [p.cold for p in plans] == [2, 2, 1]
    assert plans[0].cold_bound == "deadline" and "steady" in plans[0].reason
    assert sum(p.cold for p in plans) * 2 >= 10


def test_cold_fills_the_trough_before_a_hot_peak():
    # 8 GPUs, 512 GB budget. Steps 1-2: 60 rpm hot wants 12 x 0.8 GPU but the 3:1 ratio caps hot at
    # 6 GPUs -> 7 instances (5.6 GPUs, 210 GB); room for cold: min(2.4 GPUs -> 2, 302 GB -> 7) = 2.
    # With 2 x 2 requests per later step, 20 due by step 2 needs 20 - 8 = 12 now: 6 instances.
    plans = plan_joint(_inp([0, 60, 60], [ColdWork(20, 2)]))
    assert plans[1].hot == 7 and plans[1].hot_bound == "hot:cold ratio" and plans[1].hot_wanted == 12
    assert plans[0].cold == 6 and "pulled forward" in plans[0].reason
    assert [p.cold for p in plans[1:]] == [2, 2]  # the 8 left: 4 per step fits the room of 2 exactly


def test_hot_first_cold_yields_and_says_which_limit():
    # memory budget 0.8 x 4 x 80 = 256 GB: 6 hot instances (180 GB) leave 76 GB: one cold (40 GB)
    limits = SharedLimits(4, 80, hot_cold_ratio=10)
    hot_n, wanted, bound = hot_stage(30, HOT, limits)
    assert (hot_n, wanted, bound) == (4, 6, "hot:cold ratio")  # 4 x 0.8 = 3.2 <= 4 x 10/11 = 3.6 GPUs
    room, why = cold_room(hot_n, HOT, COLD, limits)
    assert (room, why) == (0, "compute")  # 4 - 3.2 = 0.8 GPU < 1 GPU a cold instance requests
    plans = plan_joint(_inp([30], [ColdWork(10, 0)], limits=limits))
    assert plans[0].cold == 0 and plans[0].cold_bound == "compute" and "deadline is at risk" in plans[0].reason


def test_no_demand_no_instances_and_the_reason_says_so():
    p = plan_joint(_inp([0]))[0]
    assert (p.hot, p.cold, p.hot_bound, p.cold_bound) == (0, 0, "no demand", "no work")


shapes = st.builds(PoolShape, capacity_rpm=st.floats(1, 100), utilisation=st.floats(0.3, 1.0),
                   gpu_request=st.sampled_from([0.5, 0.8, 1.0, 2.0]), memory_gb=st.floats(1, 160),
                   max_instances=st.none() | st.integers(1, 30), min_instances=st.integers(0, 2))
limits_st = st.builds(SharedLimits, physical_gpus=st.integers(1, 32), gpu_memory_gb=st.sampled_from([24.0, 80.0]),
                      memory_share=st.floats(0.5, 0.9), hot_cold_ratio=st.floats(0.5, 5.0))


@settings(max_examples=300, deadline=None)
@given(hot=shapes, cold=shapes, limits=limits_st, hot_rpm=st.lists(st.floats(0, 3000), min_size=1, max_size=12),
       cold_rpm=st.lists(st.floats(0, 500), max_size=12), queue=st.lists(
           st.builds(ColdWork, st.floats(0, 2000), st.integers(0, 10)), max_size=4), deadline=st.integers(0, 10))
def test_joint_plan_keeps_every_shared_limit_and_gives_hot_first(hot, cold, limits, hot_rpm, cold_rpm, queue, deadline):
    plans = plan_joint(JointInput(tuple(hot_rpm), tuple(queue), tuple(cold_rpm), deadline, 1.0, hot, cold, limits))
    assert len(plans) == len(hot_rpm)
    for p, rpm in zip(plans, hot_rpm):
        gpus, mem = p.usage(hot, cold)
        assert gpus <= limits.physical_gpus + 1e-6
        assert mem <= limits.memory_budget_gb + 1e-6
        assert p.hot * hot.gpu_request <= limits.hot_compute_cap + 1e-6
        assert cold.max_instances is None or p.cold <= cold.max_instances
        assert hot.max_instances is None or p.hot <= hot.max_instances
        wanted = math.ceil(rpm / (hot.capacity_rpm * hot.utilisation) - 1e-9)
        assert p.hot_wanted == max(wanted, hot.min_instances)
        if p.cold > 0 and p.hot < p.hot_wanted:
            # hot is short, so one more hot instance must break a limit even with no cold at all
            more = p.hot + 1
            assert (more * hot.gpu_request > limits.hot_compute_cap + 1e-9
                    or more * hot.memory_gb > limits.memory_budget_gb + 1e-9
                    or (hot.max_instances is not None and more > hot.max_instances))
        assert p.hot_bound and p.cold_bound and p.reason


@settings(max_examples=200, deadline=None)
@given(queue=st.lists(st.builds(ColdWork, st.floats(0, 200), st.integers(0, 8)), min_size=1, max_size=5),
       cold_rpm=st.lists(st.floats(0, 20), max_size=6))
def test_with_room_to_spare_every_cold_deadline_is_met(queue, cold_rpm):
    limits = SharedLimits(1000, 80, memory_share=0.9)
    steps = 20
    plans = plan_joint(_inp([0] * steps, queue, list(cold_rpm) + [0] * (steps - len(cold_rpm)), deadline=3,
                            limits=limits))
    served = 0.0
    due = sorted([(w.due_step, w.requests) for w in queue] +
                 [(j + 3, r) for j, r in enumerate(cold_rpm) if j > 0])
    for step, p in enumerate(plans):
        served += p.cold * COLD.capacity_rpm
        assert served + 1e-6 >= sum(r for d, r in due if d <= step), f"step {step}"
