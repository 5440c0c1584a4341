"""The measured cold start drives the planner's lead (workers.lead), with its source audited."""
from __future__ import annotations

import pytest

from workers import lead
from workers.steps import tick as plan


def test_choose_prefers_measured_launches_then_the_record_then_the_file():
    measured = lead.choose([60.0] * 9 + [600.0], 4.0, 15.0)
    assert measured.source == "measured launches" and measured.cold_start_min == pytest.approx(114 / 60)  # one slow launch lifts the P90
    record = lead.choose([], 4.0, 15.0)
    assert (record.cold_start_min, record.source) == (4.0, "measure-coldstart record")
    assert (lead.choose([], None, 15.0).cold_start_min, lead.choose([], None, 15.0).source) == (15.0, "deployments file")


def test_a_launch_measured_to_ready_changes_the_next_plans_lead(ctx):
    first = plan.step(ctx, "simdep", tick="T1", run_id="a")
    row = ctx.state.audit_log("simdep", kind="scale")[0]
    assert row["inputs"]["lead"] == {"cold_start_min": 0.5, "source": "deployments file",
                                     "detail": "cold_start_min of the deployment"}
    sim = ctx.sim("simdep")
    sim.scale_to(first.desired + 1, "test launch")
    launched = max(i["launched_at"] for i in sim.signals()["instances"])
    assert lead.observe(ctx, "simdep", sim.signals(now=launched + 5)["instances"], launched + 5) == []  # booting
    took = lead.observe(ctx, "simdep", sim.signals(now=launched + 47)["instances"], launched + 47)
    assert took == [pytest.approx(47)]  # ready at its 30 s cold start, first seen ready at 47 s
    plan.step(ctx, "simdep", tick="T2", run_id="b")
    row = ctx.state.audit_log("simdep", kind="scale")[0]
    assert row["inputs"]["lead"]["source"] == "measured launches"
    assert row["inputs"]["lead"]["cold_start_min"] == pytest.approx(47 / 60, abs=1e-3)
    shown = ctx.state.get("plan", "simdep")  # what the API serves as the plan
    assert shown["lead"] == row["inputs"]["lead"]
    assert all("measured launches" in s["reason"] for s in shown["steps"] if s["demand_rpm"] is not None)
