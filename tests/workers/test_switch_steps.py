"""The switch inside the one tick on the simulated fleet (real Redis, no processes): a switch sets
replicas per profile from the same tick's planner need, its pre-warm lead is the measured cold
start, and the planner's count waits while it runs."""
from __future__ import annotations

import math
import re
import time

import pandas as pd

from workers import lead, policy
from workers.context import Ctx
from workers.simulate import seed_deployment
from workers.steps import tick

TWO = ("deployments:\n  - name: simdep\n    cold_start_min: 0.5\n    max_replicas: 30\n    profiles:\n"
       "      day: {capacity_rpm: 100}\n      night: {capacity_rpm: 50}\n")


def _ctx(ctx, tmp_path) -> Ctx:
    deps = tmp_path / "two.yaml"
    deps.write_text(TWO)
    c = Ctx(ctx.settings.model_copy(update={"deployments_file": deps}), ctx.options, ctx.r)
    seed_deployment(c, "simdep", mean_rpm=80)
    return c


def _demand(c: Ctx, rpm: float) -> None:
    now_min = int(time.time() // 60)
    idx = pd.to_datetime([(now_min + k) * 60 for k in range(-2, 5)], unit="s")
    c.sim("simdep").load_traffic(pd.Series(rpm, index=idx))


def _split(outcome: str) -> tuple[int, int]:
    day, night = (int(x) for x in re.search(r"day (\d+), night (\d+)", outcome).groups())
    return day, night


def test_prewarm_starts_the_canary_with_the_measured_lead_and_the_planner_waits(ctx, tmp_path):
    c = _ctx(ctx, tmp_path)
    _demand(c, 150.0)                                    # 150 req/min: 2 day replicas, 3 night ones
    c.sim("simdep").reset(2)                             # two replicas that served it the minute before
    lead.record(c, "simdep", [42.0, 48.0])               # two measured launch-to-ready times
    c.state.request_profile("simdep", "night", by="test")
    out = tick.step(c, "simdep", tick="T1", run_id="r1")
    assert out.switch == "prewarm" and out.switch_applied, out
    assert "measured launches" in out.switch_reason and "0.8 min" in out.switch_reason  # P90 of 42 and 48 s
    day, night = _split(out.switch_outcome)
    # the old side untouched; the canary is one night replica of the 3 (the rest start at the move)
    assert day == 2 and night == 1 and "1 started" in out.switch_outcome, out
    assert out.outcome.startswith("held: a profile switch to night"), out   # the planner's count waits
    assert c.sim("simdep").ready_by_profile() == {"day": 2} and c.sim("simdep").current() == 3
    again = tick.step(c, "simdep", tick="T2", run_id="r2")    # the split is applied again: nothing changes
    assert again.switch_outcome is None or again.switch_outcome.startswith("no change"), again
    ps, _ = policy.load(c.state, "simdep")
    assert ps.switch.phase.value == "prewarm"


def test_the_switch_follows_the_planners_need_in_the_same_tick(ctx, tmp_path):
    c = _ctx(ctx, tmp_path)
    _demand(c, 400.0)                                    # demand is 400 req/min
    c.sim("simdep").reset(2)                             # two replicas that served it the minute before
    c.state.request_profile("simdep", "night", by="test")
    first = tick.step(c, "simdep", tick="T1", run_id="r1")
    day, night = _split(first.switch_outcome)
    # the same tick's planner need (at least the 400 req/min, counted at the switch's planning capacity):
    # day's whole need at 100 req/min a replica; night's canary beside it, a ninth of day's (10% of a
    # round robin's requests), at least one
    need = policy.load(c.state, "simdep")[0].switch.need_rpm
    assert need >= 400 and day == math.ceil(need / 100) and night == max(1, round(day / 9)), (need, first)
    journal = c.state.get("plan-journal", "simdep")
    assert journal["switch"]["replicas"] == [["day", day], ["night", night]]   # journaled with the tick


def test_a_switch_run_killed_between_apply_and_audit_is_audited_as_having_acted(ctx, tmp_path):
    """Issue 41 finding 5: a worker killed between apply and audit while a switch pre-warmed (instances
    started and stopped) was audited "not applied again (its first attempt died before applying it)",
    and no switch entry was written for its tick.  The run is cut where a kill -9 cuts it: decided,
    journaled and applied, never audited; the next tick supersedes it."""
    from datetime import datetime, timezone

    from workers import apply_tick
    from workers.locks import lease

    c = _ctx(ctx, tmp_path)
    _demand(c, 150.0)
    c.sim("simdep").reset(2)
    c.state.request_profile("simdep", "night", by="test")
    with lease(c.r, c.prefix, "plan", "simdep", 600, token="r1") as held:
        journal = tick._decide(c, "simdep", "T1", "r1", held, datetime.now(timezone.utc))
        applied = apply_tick.tick(c, "simdep", journal, recovered=False)
    assert applied.switch and applied.switch[0] and "1 started" in applied.switch[1], applied
    assert c.state.audit_log("simdep", kind="switch") == []      # the run died here
    tick.step(c, "simdep", tick="T2", run_id="r2")
    t1 = [r for r in c.state.audit_log("simdep", kind="scale", limit=50) if r["inputs"]["tick"] == "T1"]
    assert len(t1) == 1 and "had applied the profile switch before dying" in t1[0]["outcome"], t1
    assert "died before applying" not in t1[0]["outcome"]
    sw = [r for r in c.state.audit_log("simdep", kind="switch", limit=50) if r["inputs"].get("tick") == "T1"]
    assert len(sw) == 1 and sw[0]["decision"].startswith("prewarm") and sw[0]["applied"], sw
    assert "1 started" in sw[0]["inputs"]["fleet"]
