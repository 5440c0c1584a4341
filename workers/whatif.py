"""What-if backtests of policies as a Celery job (``warmcast.whatif_backtest``), for the API.

Replays the deployment's stored load (or an uploaded log) through the fleet
simulator (:mod:`warmup.sim`) under each asked policy and returns the per-policy
report (GPU-hours, share of requests waiting over 5 s, minutes short, actions).
Unless the request gives a cold start, the replay uses the lead the live planner uses
(:mod:`workers.lead`: measured launches, then the measure-coldstart record, then the
deployments file), and the report says which value and where it came from.  The replay runs the
planner's core configuration, so profiles switch on the deployment's schedule as they do live.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from warmcast.errors import InputError


def _safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_safe(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _safe(v.item())
    return v


def run_whatif(ctx, deployment: str, policies: list[str], test_start: str, capacity_rpm: float,
               cold_start_min: float | None = None, log_path: str | None = None) -> dict[str, Any]:
    from warmup.sim import from_series, load_log, run_backtest
    from workers import lead

    if not policies:
        raise InputError("policies: name at least one of static, reactive, queue, predictive, oracle")
    if log_path:
        if not Path(log_path).is_file():
            raise InputError(f"log_path {log_path}: no such file")
        log = load_log(log_path)
        source = f"uploaded log {Path(log_path).name}"
    else:
        frame = ctx.store.frame(deployment)
        if "requests" not in frame or frame["requests"].dropna().empty:
            raise InputError(f"deployment {deployment!r} has no stored load to replay")
        log = from_series(frame["requests"].dropna(), source=f"stored load of {deployment}")
        source = f"stored load of {deployment}"
    try:
        ts = pd.Timestamp(test_start)
    except ValueError as err:
        raise InputError(f"test_start {test_start!r}: {err}") from None
    used = (lead.resolve(ctx, deployment) if cold_start_min is None else
            lead.Lead(float(cold_start_min), "what-if request", "cold_start_min given with the what-if"))
    cfg = _backtest_config(ctx, deployment, float(capacity_rpm), used.cold_start_min, ts, tuple(policies))
    result = run_backtest(log, cfg, progress=False)
    sw = cfg.core_config().switch  # the capacities the replay used, by profile
    profiles = dict(sw.profile_capacity) if sw.enabled else {sw.default_profile: cfg.capacity_rpm}
    return _safe({"deployment": deployment, "source": source, "lead": used.as_doc(), "profiles": profiles,
                  "policies": result.rows, "meta": result.meta})


def _backtest_config(ctx, deployment: str, capacity_rpm: float, cold_start_min: float, test_start: pd.Timestamp,
                     policies: tuple[str, ...]):
    """The replay's configuration as the live loop runs it: the core config the planner uses (profiles
    and schedule, so the predictive replay switches to the night profile as live; calibrated
    capacities; stored policy overrides), its quantile, bounds, GPUs per replica and asleep tier.
    ``capacity_rpm`` is the default profile's (the request's, or its calibrated/declared one)."""
    from warmup.sim import FleetBacktestConfig

    core, dep = ctx.cfg(deployment), ctx.dep(deployment)
    sleep = {} if dep.sleep is None else {"wake_s": dep.sleep.wake_s, "sleep_cost_share": dep.sleep.cost_share}
    return FleetBacktestConfig(capacity_rpm=capacity_rpm, cold_start_min=cold_start_min, test_start=test_start,
                               policies=policies,
                               forecaster=os.environ.get("WARMCAST_WORKERS_WHATIF_FORECASTER", "lstm"), core=core,
                               quantile=core.scaling.quantile, min_replicas=dep.min_replicas,
                               max_replicas=dep.max_replicas, gpus_per_replica=dep.gpus_per_replica, **sleep)
