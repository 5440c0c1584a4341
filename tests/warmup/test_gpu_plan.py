"""The capacity plan by GPU type, checked against answers worked out by hand."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from warmup.planning.gpuplan import MixRequest, cheapest_mix, plan_gpu_mix, slot_peaks, what_if
from warmup.planning.gpus import Capacity, GpuOption, GpuType, build_options, check_fit, memory_need_gb

A100 = GpuType("A100-80G", 80, 312, 2039, 1.0)
A10G = GpuType("A10G", 24, 125, 600, 0.35)
L4 = GpuType("L4", 24, 121, 300, 0.28)
TYPES = [A100, A10G, L4]
# cost per rpm: A100 1.0/100 = 0.0100, A10G 0.35/40 = 0.00875, L4 0.28/35 = 0.0080
CAPS = {"A100-80G": Capacity(100, "declared"), "A10G": Capacity(40, "declared"), "L4": Capacity(35, "declared")}


def _req(demand, base_gb=10, ctx=8192, util=1.0, **kw):
    options, excluded = build_options(TYPES, CAPS, base_gb, ctx, max_instances=kw.pop("max_instances", None))
    return MixRequest(tuple(demand), tuple(f"h{i}" for i in range(len(demand))), tuple(options),
                      utilisation=util, **kw), excluded


def test_memory_grows_with_log_of_context_above_8k():
    assert memory_need_gb(10, 4096) == 10
    assert memory_need_gb(10, 8192) == 10
    assert memory_need_gb(10, 32768) == pytest.approx(30)  # 10 x (1 + log2(4))
    assert not check_fit(L4, 10, 32768).fits and check_fit(A100, 10, 32768).fits


def test_a_model_that_fits_only_on_a100():
    # 30 GB at 16k context needs 30 x 2 = 60 GB: over 24 GB, under 80 GB
    req, excluded = _req([250.0, 0.0], base_gb=30, ctx=16384, util=0.5)
    assert [o.gpu.name for o in req.options] == ["A100-80G"]
    assert set(excluded) == {"A10G", "L4"} and "60.0 GB" in excluded["L4"]
    plan = plan_gpu_mix(req)
    assert plan.slots[0].counts == {"A100-80G": 5}  # 250 / (100 x 0.5)
    assert plan.slots[1].counts == {"A100-80G": 0} and plan.slots[1].bound == "no demand"
    assert plan.cost == 5.0 and plan.baseline_cost == 5.0 and plan.saving == 0.0


def test_a_load_that_l4s_serve_cheapest():
    # 100 rpm: 3 L4 = 0.84 (105 rpm); 2 L4 + 1 A10G = 0.91; 1 A100 = 1.00; 3 A10G = 1.05
    req, _ = _req([100.0])
    plan = plan_gpu_mix(req)
    s = plan.slots[0]
    assert s.counts == {"A100-80G": 0, "A10G": 0, "L4": 3}
    assert s.cost == pytest.approx(0.84) and s.capacity_rpm == pytest.approx(105)
    assert s.bound == "slo" and plan.baseline_cost == 1.0
    assert plan.saving == pytest.approx(0.16)


def test_a_limit_changes_the_mix_and_says_which():
    req, _ = _req([100.0], max_instances={"L4": 2})
    s = plan_gpu_mix(req).slots[0]
    assert s.counts == {"A100-80G": 0, "A10G": 1, "L4": 2}  # 0.91 beats 1 A100 (1.00) and 3 A10G (1.05)
    assert s.cost == pytest.approx(0.91) and s.bound == "max_instances of L4"


def test_a_gpu_budget_binds_and_unmet_demand_is_reported():
    req, _ = _req([100.0], max_gpus=2)
    s = plan_gpu_mix(req).slots[0]
    assert s.counts == {"A100-80G": 1, "A10G": 0, "L4": 0} and s.bound == "max_gpus"  # 3 L4 would be cheaper
    _, l4_only = what_if(req, types=("L4",))
    s = l4_only.slots[0]
    assert s.counts == {"L4": 2} and s.capacity_rpm == 70 and "SLO NOT MET" in s.reason and s.bound == "max_gpus"


def test_growth_what_if():
    # 70 rpm: 2 L4 (0.56); +30% = 91 rpm: 3 L4 (0.84) beats 2 L4 + 1 A10G (0.91) and 1 A100 (1.00)
    req, _ = _req([70.0])
    base, grown = what_if(req, growth=1.3)
    assert base.slots[0].counts["L4"] == 2 and base.cost == pytest.approx(0.56)
    assert grown.slots[0].demand_rpm == pytest.approx(91) and grown.slots[0].counts["L4"] == 3
    assert grown.cost == pytest.approx(0.84) and grown.baseline_cost == 1.0


def test_type_and_slo_what_ifs():
    req, _ = _req([70.0])
    _, no_l4 = what_if(req, types=("A100-80G", "A10G"))
    assert no_l4.slots[0].counts == {"A100-80G": 0, "A10G": 2}  # 80 rpm for 0.70 < 1 A100
    # 70 rpm at 50%: an L4 counts 17.5 rpm, 4 L4 (1.12) beat 3 L4 + 1 A10G (1.19) and 1 A100 + 1 A10G (1.35)
    _, strict = what_if(req, utilisation=0.5)
    assert strict.slots[0].counts["L4"] == 4 and strict.slots[0].capacity_rpm == pytest.approx(70)
    assert strict.cost == pytest.approx(4 * 0.28) and strict.baseline_cost == 2.0
    with pytest.raises(ValueError, match="H100"):
        what_if(req, types=("H100",))


def test_per_minute_demand_becomes_the_busiest_minute_per_hour():
    minutes = [float(m % 60) for m in range(120)]
    minutes[61] = float("nan")
    assert slot_peaks(minutes) == [59.0, 59.0]


@settings(max_examples=200, deadline=None)
@given(demand=st.floats(0.5, 60), caps=st.lists(st.floats(10, 120), min_size=3, max_size=3),
       limit=st.none() | st.integers(1, 6), util=st.floats(0.3, 1.0))
def test_the_search_finds_the_brute_force_optimum(demand, caps, limit, util):
    options = tuple(GpuOption(t, c, "declared", 1, limit if t.name == "L4" else None) for t, c in zip(TYPES, caps))
    eff = [c * util for c in caps]
    best = None
    for counts in itertools.product(*[range(int(demand / e) + 2) for e in eff]):
        if (limit is None or counts[2] <= limit) and sum(n * e for n, e in zip(counts, eff)) >= demand - 1e-9:
            cost = sum(n * t.cost_index for n, t in zip(counts, TYPES))
            best = cost if best is None else min(best, cost)
    found = cheapest_mix(demand, options, util, None)
    assert found is not None and found.cost == pytest.approx(best)
