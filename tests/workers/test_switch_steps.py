"""The switch and plan steps on the simulated fleet (real Redis, no processes): a switch sets
replicas per profile, its pre-warm lead is the measured cold start, and the planner holds meanwhile."""
from __future__ import annotations

from workers import lead, policy
from workers.context import Ctx
from workers.simulate import seed_deployment
from workers.steps import plan, switch

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
