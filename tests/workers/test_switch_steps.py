"""The switch and plan steps on the simulated fleet (real Redis, no processes): a switch sets
replicas per profile, its pre-warm lead is the measured cold start, and the planner holds meanwhile."""
from __future__ import annotations

import time

import pandas as pd

from workers import lead, policy
from workers.context import Ctx
from workers.simulate import seed_deployment
from workers.steps import plan, signals, switch

TWO = ("deployments:\n  - name: simdep\n    cold_start_min: 0.5\n    profiles:\n"
       "      day: {capacity_rpm: 100}\n      night: {capacity_rpm: 50}\n")


def _ctx(ctx, tmp_path) -> Ctx:
    deps = tmp_path / "two.yaml"
    deps.write_text(TWO)
    c = Ctx(ctx.settings.model_copy(update={"deployments_file": deps}), ctx.options, ctx.r)
    seed_deployment(c, "simdep", mean_rpm=80)
    return c


def test_prewarm_starts_the_whole_need_with_the_measured_lead_and_the_planner_holds(ctx, tmp_path):
    c = _ctx(ctx, tmp_path)
    c.sim("simdep").reset(2)
    lead.record(c, "simdep", [42.0, 48.0])               # two measured launch-to-ready times
    c.state.request_profile("simdep", "night", by="test")
    out = switch.step(c, "simdep")
    # 2 day replicas serve 200 req/min: night (50 each) needs 4, all launched; day untouched.
    assert out.action == "prewarm" and out.applied and "day 2, night 4: 4 started" in out.outcome, out
    assert "measured launches" in out.reason and "0.8 min" in out.reason   # P90 of 42 and 48 s
    assert c.sim("simdep").ready_by_profile() == {"day": 2}
    assert sorted(i["profile"] for i in c.sim("simdep").signals()["instances"]) == ["day"] * 2 + ["night"] * 4
    again = switch.step(c, "simdep")                      # the split is applied again: nothing changes
    assert again.outcome is None or again.outcome.startswith("no change"), again
    ps, _ = policy.load(c.state, "simdep")
    assert ps.switch.phase.value == "prewarm"
    held = plan.step(c, "simdep", tick="T1", run_id="r1")
    assert "held: a profile switch to night" in held.outcome and c.sim("simdep").current() == 6


def test_the_switch_follows_the_planners_need_while_the_planner_holds(ctx, tmp_path):
    import re

    c = _ctx(ctx, tmp_path)
    c.sim("simdep").reset(2)
    now_min = int(time.time() // 60)
    idx = pd.to_datetime([(now_min + k) * 60 for k in range(-2, 5)], unit="s")
    c.sim("simdep").load_traffic(pd.Series(400.0, index=idx))    # demand is 400 req/min
    c.state.request_profile("simdep", "night", by="test")
    assert "night 4" in switch.step(c, "simdep").outcome     # sized on what day serves: 2 x 100 req/min
    # The planner, held, still decides each tick; its need (the highest raw count in its stabilisation
    # window, at least 4 x 100 req/min) sizes the switch from then on: day's whole need at 100 req/min
    # a replica, night's at 50.
    signals.step(c, "simdep")
    held = plan.step(c, "simdep", tick="T1", run_id="r1")
    assert held.outcome.startswith("held")
    grown = switch.step(c, "simdep")
    day, night = (int(x) for x in re.search(r"day (\d+), night (\d+)", grown.outcome).groups())
    assert day >= 4 and night == 2 * day, grown
    # A journal older than 5 minutes is not the planner's need now: the switch keeps the one it has.
    journal = c.state.get("plan-journal", "simdep")
    c.state.put("plan-journal", "simdep", {**journal, "decided_at": 0, "decision": {**journal["decision"], "raw": 1}})
    kept = switch.step(c, "simdep")
    assert kept.outcome == f"no change: replicas per profile day {day}, night {night}", kept
