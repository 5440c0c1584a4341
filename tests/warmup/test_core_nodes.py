"""Warm GPUs per node pool (issue 45, warmup/core/nodes.py): pooled headroom is smaller than the sum
of each deployment's alone when their peaks do not coincide; the pool never exceeds max_nodes;
scale-in waits; every number has its reason."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings, strategies as st

from warmup.core.inputs import ForecastInput
from warmup.core.nodes import Member, NodePoolConfig, PoolInput, PoolState, decide_pool

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
LEVELS = (0.1, 0.5, 0.9, 0.95, 0.99)
SPREAD = (0.8, 1.0, 1.2, 1.3, 1.5)   # each level over the median


def forecast(mid: list[float]) -> ForecastInput:
    return ForecastInput(NOW, LEVELS, tuple(tuple(v * f for v in mid) for f in SPREAD), "test")


def peaked(peak_at: int, height: float, base: float = 100.0, minutes: int = 15) -> list[float]:
    return [base + (height if t == peak_at else 0.0) for t in range(minutes)]


def member(name: str, mid: list[float] | None, held: int = 0) -> Member:
    return Member(name, forecast(mid) if mid is not None else None, capacity_rpm=50.0, gpus_per_instance=1,
                  gpus_held=held)


POOL = NodePoolConfig("a100", gpus_per_node=8, node_lead_min=10, max_nodes=50)


def warm(*members: Member, cfg: NodePoolConfig = POOL, state: PoolState = PoolState()) -> int:
    return decide_pool(cfg, PoolInput(NOW, tuple(members), nodes_up=0), state).warm_gpus


@settings(max_examples=60, deadline=None)
@given(a=st.integers(0, 9), gap=st.integers(1, 5), h1=st.floats(200, 2000), h2=st.floats(200, 2000))
def test_two_deployments_whose_peaks_do_not_coincide_need_fewer_warm_gpus_than_each_alone(a, gap, h1, h2):
    b = (a + gap) % 10
    one, two = member("one", peaked(a, h1)), member("two", peaked(b, h2))
    assert warm(one, two) < warm(one) + warm(two)


@settings(max_examples=80, deadline=None)
@given(mids=st.lists(st.floats(0, 50_000), min_size=1, max_size=6), held=st.lists(st.integers(0, 200), min_size=6,
       max_size=6), max_nodes=st.integers(1, 20))
def test_the_pool_never_exceeds_max_nodes(mids, held, max_nodes):
    cfg = NodePoolConfig("p", gpus_per_node=8, node_lead_min=10, max_nodes=max_nodes)
    ms = [member(f"d{i}", [m] * 12, held=min(h, 8)) for i, (m, h) in enumerate(zip(mids, held))]
    d = decide_pool(cfg, PoolInput(NOW, tuple(ms), nodes_up=0), PoolState())
    in_use = sum(m.gpus_held for m in ms)
    assert d.warm_gpus >= 0
    assert in_use + d.warm_gpus <= max(in_use, max_nodes * 8)
    if in_use <= max_nodes * 8:
        assert d.nodes_wanted <= max_nodes


def test_the_warm_gpus_cover_the_pooled_need_less_what_instances_hold():
    d = decide_pool(POOL, PoolInput(NOW, (member("one", [500.0] * 12, held=4),), nodes_up=1), PoolState())
    # P95 of a normal law with P50 10 GPUs and P95 13 GPUs: 13 GPUs, 4 held -> 9 warm on 2 nodes
    assert d.warm_gpus == 9 and d.nodes_wanted == 2
    assert "P95 of the pooled demand" in d.reason and "4 GPU(s) held" in d.reason


def test_scale_in_waits_for_the_stabilisation_window_and_scale_out_does_not():
    cfg = NodePoolConfig("p", gpus_per_node=8, node_lead_min=10, max_nodes=50, stabilise_min=5)
    high = decide_pool(cfg, PoolInput(NOW, (member("one", [1000.0] * 12),), 0), PoolState())
    later = NOW + timedelta(minutes=2)
    low = decide_pool(cfg, PoolInput(later, (member("one", [100.0] * 12),), 0), high.state)
    assert low.warm_gpus == high.warm_gpus and "scale-in waits" in low.reason
    after = decide_pool(cfg, PoolInput(NOW + timedelta(minutes=6), (member("one", [100.0] * 12),), 0), low.state)
    assert after.warm_gpus < high.warm_gpus


def test_a_pool_without_forecasts_holds_no_warm_gpus_and_says_why():
    d = decide_pool(POOL, PoolInput(NOW, (member("one", None, held=3),), nodes_up=1), PoolState())
    assert d.warm_gpus == 0 and d.nodes_wanted == 1
    assert "no forecast" in d.reason


def test_max_nodes_caps_the_warm_gpus_with_the_reason():
    cfg = NodePoolConfig("p", gpus_per_node=8, node_lead_min=10, max_nodes=2)
    d = decide_pool(cfg, PoolInput(NOW, (member("one", [5000.0] * 12, held=6),), 1), PoolState())
    assert d.warm_gpus == 10 and d.nodes_wanted == 2
    assert "capped at 10" in d.reason


def test_a_deployment_held_at_half_its_capacity_needs_twice_the_gpus():
    """Demand counts in GPUs at the utilisation the deployment holds its instances at (its reactive
    guard's target): at full capacity the pooled need sat below what such deployments hold, and the
    pool kept no warm GPU at all."""
    from dataclasses import replace

    from warmup.core.nodes import holding_utilisation

    flat = member("flat", [1000.0] * 12)          # 20 instances' worth at full capacity, P95 26
    half = replace(flat, utilisation=holding_utilisation(0.5))
    assert warm(flat) == 26 and warm(half) == 52
    assert holding_utilisation(None, 0.8) == 0.8 and holding_utilisation(0.7, 0.8) == 0.7
