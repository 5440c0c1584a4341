"""The day's joint plan for a deployment's hot and cold pools, from their stored series.

Edge around :func:`warmup.planning.pools.plan_joint`: the deployment's ``pools`` and ``gpu``
sections become pool shapes and shared limits; per step of the next day, hot demand is
the ``quantile`` of the same time of day in the stored hot series, and expected cold
arrivals are the mean of the same hour in the stored cold series (batch volume, not peaks).
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from warmcast.config.deployments import Deployment
from warmcast.errors import InputError
from warmcast.resolution import resolution_of
from warmup.planning.gpus import memory_need_gb
from warmup.planning.pools import ColdWork, JointInput, PoolShape, SharedLimits, plan_joint
from warmup.planning.gpu_catalogue import load_catalogue, profile_context


def shapes(dep: Deployment) -> tuple[PoolShape, PoolShape, SharedLimits]:
    """Pool shapes and shared limits from the deployments file (memory from gpu.model_memory_gb
    at each pool profile's context; GPU memory of gpu.reference, else an A100-80G)."""
    if dep.pools is None:
        raise InputError(f"deployment {dep.name}: no 'pools:' section in the deployments file")
    types = load_catalogue(dep.gpu.catalogue if dep.gpu else None)
    ref = dep.gpu.reference if dep.gpu else "A100-80G"
    if ref not in types:
        raise InputError(f"deployment {dep.name}: gpu.reference {ref!r} is not in the GPU catalogue {sorted(types)}")

    def shape(name: str) -> PoolShape:
        spec = getattr(dep.pools, name)
        profile = spec.profiles[0]
        mem = memory_need_gb(dep.gpu.model_memory_gb, profile_context(dep, profile)) if dep.gpu else 0.0
        return PoolShape(dep.profiles[profile].capacity_rpm, spec.target_utilisation, spec.gpu_request, mem,
                         spec.max_instances)

    lim = dep.pools.limits
    return shape("hot"), shape("cold"), SharedLimits(lim.physical_gpus, types[ref].memory_gb, lim.memory_share,
                                                     lim.hot_cold_ratio)


def _minutes(hist: pd.Series) -> pd.Series:
    """A coarse series' per-minute rates on every minute of their bins: a step finer than the bins (5-minute
    steps on 10-minute bins) must not find every other step empty."""
    res = resolution_of(hist)
    if res == 1 or not len(hist):
        return hist
    idx = pd.date_range(hist.index[0], hist.index[-1] + pd.Timedelta(minutes=res - 1), freq="min")
    return hist.reindex(idx, method="ffill", limit=res - 1)


def _by_time_of_day(hist: pd.Series, step_min: int, how: str, q: float) -> pd.Series:
    h = _minutes(hist).dropna()
    slot = (h.index.hour * 60 + h.index.minute) // step_min
    grouped = h.groupby(slot)
    out = grouped.quantile(q) if how == "quantile" else grouped.mean()
    return out.reindex(range(1440 // step_min), fill_value=0.0)


def day_plan(dep: Deployment, hot_hist: pd.Series, cold_hist: pd.Series, step_min: int = 10,
             quantile: float = 0.9) -> list[dict[str, Any]]:
    """One row per step of the day after the stored hot series: instances per pool and what bound them."""
    if not len(hot_hist) or not len(cold_hist):
        raise InputError(f"deployment {dep.name}: both pools need stored load (warmcast pools ingest)")
    hot, cold, limits = shapes(dep)
    start = (hot_hist.index[-1] + pd.Timedelta(minutes=1)).ceil("D")
    hot_rpm = _by_time_of_day(hot_hist, step_min, "quantile", quantile)
    cold_rpm = _by_time_of_day(cold_hist, 60, "mean", 0.5).repeat(60 // step_min).to_numpy()
    deadline = math.floor(dep.pools.cold.slo.deadline_min / step_min)
    first = (ColdWork(float(cold_rpm[0]) * step_min, deadline),)  # the first step's arrivals, due on time
    plans = plan_joint(JointInput(tuple(hot_rpm.to_numpy(float)), first, tuple(cold_rpm.astype(float)), deadline,
                                  float(step_min), hot, cold, limits))
    rows = []
    for i, p in enumerate(plans):
        gpus, mem = p.usage(hot, cold)
        rows.append({"start": (start + pd.Timedelta(minutes=i * step_min)).strftime("%Y-%m-%d %H:%M"),
                     "hot_rpm": round(float(hot_rpm.iloc[i]), 3), "cold_rpm": round(float(cold_rpm[i]), 3),
                     "hot": p.hot, "cold": p.cold, "gpus": round(gpus, 3), "memory_gb": round(mem, 1),
                     "hot_bound": p.hot_bound, "cold_bound": p.cold_bound, "reason": p.reason})
    return rows


def summary(rows: list[dict[str, Any]], step_min: int) -> str:
    frame = pd.DataFrame(rows)
    hours = frame.groupby(frame["start"].str[:13]).agg(
        hot=("hot", "max"), cold=("cold", "max"), gpus=("gpus", "max"),
        bounds=("cold_bound", lambda b: ",".join(sorted(set(b)))))
    gpu_hours = frame["gpus"].sum() * step_min / 60
    lines = [f"  {'hour':13} {'hot':>4} {'cold':>4} {'GPUs':>6}  cold bound"]
    lines += [f"  {h:13} {r.hot:>4} {r.cold:>4} {r.gpus:>6.1f}  {r.bounds}" for h, r in hours.iterrows()]
    # the bounds as words, like the cold column's (a Python list's repr is not for the reader)
    lines.append(f"  total {gpu_hours:.1f} GPU-hours; hot bound by: {', '.join(sorted(set(frame['hot_bound'])))}")
    return "\n".join(lines)
