"""The quickstart job, end to end on the embedded defaults:
generate -> ingest -> summarise -> forecast -> plan (forecast-only mode)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from warmcast.config.settings import Settings


def run_demo(settings: Settings, days: int, deployment: str, workdir: Path,
             echo: Callable[[str], None] = print) -> None:
    from warmcast.generate import WorkloadSpec, write_request_log
    from warmcast.ingest import aggregate_file
    from warmcast.runtime import open_state, open_store, redis_url
    from warmcast.summary import summary_text

    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "requests.csv"
    rows = write_request_log(log, WorkloadSpec(days=days))
    echo(f"1/4 generated {rows:,} synthetic requests over {days} days -> {log}")
    store = open_store(settings)
    frame, report = aggregate_file([log], progress=True)
    store.upsert_frame(deployment, frame)
    echo(f"2/4 ingested into Redis at {redis_url(settings)}\n{report.summary()}")
    history = store.frame(deployment)
    echo("3/4 summary\n" + summary_text(history, deployment, 24 * 60))
    echo("4/4 replaying the last day: forecast and plan every 2 hours (forecast-only mode, nothing applied)")
    echo(replay_plans(settings, deployment, history, open_state(settings)))
    echo(f"\nnext: warmcast backtest fleet --log {log} --capacity-rpm 300 --cold-start-min 15 "
         f"--test-start {history.index[-1].normalize() - pd.Timedelta(days=1):%Y-%m-%d} --out {workdir / 'fleet'}")


def replay_plans(settings: Settings, deployment: str, history: pd.DataFrame, state, step_h: int = 2) -> str:
    """Forecast and decide at origins over the last day, as the live loop would have; each
    decision goes to the audit log with its reason. Each row shows the profile the decision
    planned with (``active>target`` while a switch is under way) and one replica's capacity then."""
    from forecaster.live import forecast_deployment
    from forecaster.registry import Registry
    from warmcast.config.deployments import demo_deployment
    from warmup.core.adapters import core_config, forecast_input
    from warmup.core import Instance, InstanceState, TickInput, replicas_for
    from warmup.core.engine import decide, planning_capacity
    from warmup.core.switching import scheduled_profile

    dep = demo_deployment(deployment)
    cfg = core_config(dep, dry_run=True)
    registry = Registry(settings.models_dir)
    end = history.index[-1] + pd.Timedelta(minutes=1)
    lines = [f"{'time (UTC)':17} {'profile':>11} {'rpm/replica':>11} {'now/min':>8} {'P90 +15m':>9} {'model':>14} "
             f"{'replicas':>9}  reason"]
    policy, replicas = None, None
    for origin in pd.date_range(end - pd.Timedelta(days=1), end, freq=f"{step_h}h", inclusive="left"):
        past = history.loc[: origin - pd.Timedelta(minutes=1)]
        fc = forecast_deployment(past, registry, deployment)
        now_rpm = float(past["requests"].iloc[-1])
        profile, _ = scheduled_profile(cfg.switch, origin.to_pydatetime())
        capacity = dep.profiles[profile].capacity_rpm
        replicas = replicas or max(dep.min_replicas, replicas_for(now_rpm, capacity, 1.0))
        instances = tuple(Instance(f"i{i}", InstanceState.READY_BUSY, profile, now_rpm / replicas)
                          for i in range(replicas))
        out = decide(cfg, TickInput(now=origin.to_pydatetime(), instances=instances, observed_rpm=now_rpm,
                                    forecast=forecast_input(fc), active_profile=profile), policy)
        policy, desired = out.state, out.scale.desired
        # show what the decision planned with: mid-switch the core keeps the old profile's capacity
        profile = policy.switch.active_profile or profile
        capacity = planning_capacity(cfg, policy, profile)
        target = policy.switch.target_profile
        shown = f"{profile}>{target}" if target and target != profile else profile
        state.audit(deployment, "scale", f"{out.scale.current}->{desired}", str(out.scale.reason),
                    applied=False, inputs={"observed_rpm": now_rpm, "model": fc.model}, ts=origin)
        lines.append(f"{origin:%Y-%m-%d %H:%M} {shown:>11} {capacity:11.0f} {now_rpm:8.0f} "
                     f"{fc.quantile(0.9)[14]:9.0f} {fc.model:>14} {out.scale.current:>4}->{desired:<4}  "
                     f"{out.scale.reason}")
        replicas = desired
    return "\n".join(lines)
