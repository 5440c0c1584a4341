"""Issue 46 item 3: ``plan capacity`` claims no saving it does not have.

The all-A100 baseline obeys the limits the plan obeys (max_replicas, max_gpus, the type's own
availability): a "25.8% saving" came from 4 A100s against a plan capped at max_replicas 3, and a plan
that *was* all A100 read "38% below all-A100".  A plan equal to the baseline claims no saving, and the
picture marks the hours whose SLO is not met."""
from __future__ import annotations

from dataclasses import replace

import pytest

from test_gpu_plan import _req
from warmup.planning.gpu_report import _plot, text
from warmup.planning.gpuplan import plan_gpu_mix


def test_the_baseline_obeys_max_replicas():
    req, _ = _req([400.0, 100.0])   # 4 A100s (100 rpm each) for the first hour, without limits
    plan = plan_gpu_mix(replace(req, max_instances=3))
    assert sum(plan.slots[0].counts.values()) <= 3 and plan.slots[0].reason.startswith("SLO NOT MET")
    # all-A100 within max_replicas 3: 3 + 1 A100-hours, short of demand in the first hour like the plan
    assert plan.baseline_cost == pytest.approx(4.0) and plan.baseline_short == 1
    assert plan.saving == pytest.approx(1 - plan.cost / 4.0)


def test_a_plan_that_is_the_all_a100_fleet_claims_no_saving():
    req, _ = _req([700.0, 700.0])
    plan = plan_gpu_mix(replace(req, max_instances=5))   # 5 A100s: the most capacity 5 instances give
    assert all(s.counts == {"A100-80G": 5, "A10G": 0, "L4": 0} for s in plan.slots)
    assert plan.same_as_baseline and plan.saving == 0.0 and plan.baseline_cost == pytest.approx(plan.cost)


def _doc(plan, req) -> dict:
    from warmup.planning.gpu_report import _plan_doc

    return {"deployment": "d", "pool": None, "profile": "p", "horizon": "24h", "quantile": 0.9, "utilisation": 1.0,
            "method": "m", "notes": [], "excluded": {}, "what_if": None,
            "options": [{"type": o.gpu.name, "cost_index": o.gpu.cost_index} for o in req.options],
            **_plan_doc(plan)}


def test_the_text_and_the_picture_claim_only_real_savings_and_mark_unmet_hours(tmp_path):
    req, _ = _req([700.0, 700.0])
    req = replace(req, max_instances=5)
    doc = _doc(plan_gpu_mix(req), req)
    out = text(doc)
    assert "saving" not in out.replace("no saving", "") and "the plan is all A100-80G: no saving" in out
    labels, title = _plot(doc, tmp_path / "plan.png")
    assert "below all-A100" not in title and "2 slot(s) SLO NOT MET" in title
    assert any(lab.startswith("SLO NOT MET") for lab in labels)
    # a real saving is still said: 100 rpm on 3 L4 (0.84) against 1 A100 (1.00)
    req, _ = _req([100.0])
    doc = _doc(plan_gpu_mix(req), req)
    assert "saving 16.0%" in text(doc) and "16% below all-A100" in _plot(doc, tmp_path / "p2.png")[1]
