"""Issue 32 item 1: ``plan capacity`` stays within the deployment's max_replicas (all GPU types together)
and says when that bound binds (it planned 73 instances for a max of 40)."""
from __future__ import annotations

from dataclasses import replace

from test_gpu_plan import _req
from warmup.planning.gpuplan import plan_gpu_mix


def test_max_replicas_moves_the_mix_to_bigger_instances_and_says_so():
    req, _ = _req([700.0])
    free = plan_gpu_mix(req).slots[0]
    assert free.counts == {"A100-80G": 0, "A10G": 0, "L4": 20} and free.bound == "slo"  # 20 x 35 rpm
    slot = plan_gpu_mix(replace(req, max_instances=10)).slots[0]
    assert sum(slot.counts.values()) <= 10 and slot.capacity_rpm >= 700
    assert slot.bound == "max_replicas (10)" and "within max_replicas (10)" in slot.reason


def test_max_replicas_that_cannot_meet_demand_is_named_and_kept():
    req, _ = _req([700.0])
    slot = plan_gpu_mix(replace(req, max_instances=5)).slots[0]
    assert sum(slot.counts.values()) == 5 and slot.counts["A100-80G"] == 5  # the most capacity 5 instances give
    assert slot.reason.startswith("SLO NOT MET") and "max_replicas (5)" in slot.reason
