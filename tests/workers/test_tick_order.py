"""Following one deployment through a tick: each step module once, in order (the deployment's view
first: its configuration with every layer and the planner's lead, built once, issue 42).

The tick runs in-process on the simulated fleet while a profiler records which of the loop's
modules the planning step enters. A call made from inside a module (audit formatting the
decision's reason, the core building its values) belongs to that module's visit; only the
outermost entries count, and a module entered again after another would show up twice.
"""
from __future__ import annotations

import sys
import time

import pandas as pd

from workers.simulate import seed_deployment
from workers.steps import tick as plan

STAGES = {"workers.steps.signals": "signals", "workers.steps.forecast": "forecast", "workers.apply": "apply",
          "workers.apply_tick": "apply",
          "workers.audit": "audit"}


def _stage(frame) -> str | None:
    """The stage a frame's module is, "" for building one of the core's values (no visit, and
    nothing it calls is one), None for the plumbing between stages (locks, policy state, serde)."""
    mod, name = frame.f_globals.get("__name__", ""), frame.f_code.co_name
    if mod == "workers.context" and name == "view":   # the tick's view of its deployment, built once
        return "view"
    if mod.startswith("warmup.core"):
        return "" if name.startswith("__") else "plan"
    return STAGES.get(mod)


def visits(fn) -> list[str]:
    """The stage modules ``fn()`` enters at the outermost level, in order, consecutive repeats merged."""
    seen: list[str] = []
    inside: list[object] = []  # the frame of the stage being visited

    def profile(frame, event, arg) -> None:
        if event == "call" and not inside:
            stage = _stage(frame)
            if stage is not None:
                inside.append(frame)
                if stage and (not seen or seen[-1] != stage):
                    seen.append(stage)
        elif event == "return" and inside and frame is inside[0]:
            inside.clear()

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_visits_merges_repeats_and_sees_a_module_entered_twice():
    """The recorder itself: a second, separate entry into a module is visible."""
    from workers.steps import signals

    doc = {"observed_rpm": 1.0, "instances": []}
    assert visits(lambda: (signals.value(doc, "observed_rpm"), signals.instances_of(doc))) == ["signals"]
    assert visits(lambda: (signals.value(doc, "a"), plan.plan_replicas, signals.value(doc, "b"))) == ["signals"]
    from warmup.core import replicas_for

    assert visits(lambda: (signals.value(doc, "a"), replicas_for(1.0, 1.0, 1.0), signals.value(doc, "b"))) == \
        ["signals", "plan", "signals"]


def test_one_planning_tick_goes_signals_forecast_plan_apply_audit_once_each(ctx):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    now_min = int(time.time() // 60)
    idx = pd.to_datetime([(now_min + k) * 60 for k in range(-2, 5)], unit="s")
    ctx.sim("simdep").load_traffic(pd.Series(350.0, index=idx))  # needs 4 replicas of 100 req/min
    ctx.sim("simdep").reset(1)
    out = []
    order = visits(lambda: out.append(plan.step(ctx, "simdep", tick="T1", run_id="task-a")))
    assert out[0].status == "applied" and out[0].actual == 4  # a tick that acted, so apply had work
    assert order == ["view", "signals", "forecast", "plan", "apply", "audit"]
