"""``warmcast backtest nodes`` (issue 45): deployments sharing one node pool, each with its own
log, under five policies, node GPU-hours and each deployment's lateness side by side.

- ``hpa``: each deployment's HPA (the Kubernetes rules of ``autoscalers.ReactiveHPA``); nodes only
  for launches that need one (the Cluster Autoscaler without overprovisioning);
- ``hpa_balloons``: the same with a fixed count of warm GPUs all day, the smallest of a grid that
  keeps every deployment that can meet the SLO within it, chosen *on the test days*: hindsight,
  labelled so and given no verdict;
- ``per_deployment_warmcast``: the decision core per deployment planning one cold start of node
  lead plus instance lead, nodes as for ``hpa``;
- ``warmcast``: the core per deployment on its instance lead, and the pool's warm GPUs from the
  core's fleet decision (``warmup.core.nodes``) on the same forecasts;
- ``oracle``: each minute's true need per deployment, on nodes started one node lead ahead.

Traces from different dates are aligned onto one week: each log is shifted by the whole weeks that
put its first Monday on the first log's (weekday and time of day kept), and the run covers the
minutes every shifted log has (the report says each shift).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmup.core import CoreConfig
from warmup.core.nodes import holding_utilisation
from warmup.sim.autoscalers import ReactiveHPA
from warmup.sim.data import LoadLog
from warmup.sim.nodes import NodeParams
from warmup.sim.nodes_run import FixedBalloons, FleetDecision, Member, NodesRun, run_nodes
from warmup.sim.policies import CorePolicy, oracle_need

POLICIES = ("warmcast", "hpa", "hpa_balloons", "per_deployment_warmcast", "oracle")
BALLOON_GRID = (0, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class NodeMember:
    """One deployment of the pool: its aligned log, capacity, GPUs per instance and instance lead."""

    name: str
    log: LoadLog
    capacity_rpm: float
    gpus: int = 1
    instance_lead_min: float = 3.0
    min_replicas: int = 1
    max_replicas: int = 10_000
    late_share: float = 0.0005
    wait_s: float = 5.0


def first_monday(t: pd.Timestamp) -> pd.Timestamp:
    day = t.normalize()
    return day + pd.Timedelta(days=(7 - day.weekday()) % 7)


def align(logs: dict[str, LoadLog]) -> tuple[dict[str, LoadLog], dict[str, str]]:
    """Each log shifted by whole weeks onto the first one's weeks; (shifted logs, what each shift was)."""
    if not logs:
        raise InputError("backtest nodes needs at least one --log NAME=FILE")
    ref = first_monday(next(iter(logs.values())).start)
    out, notes = {}, {}
    for name, log in logs.items():
        days = int(round((ref - first_monday(log.start)) / pd.Timedelta(days=1)))
        out[name] = replace(log, start=log.start + pd.Timedelta(days=days),
                            minute=log.minute.set_axis(log.minute.index + pd.Timedelta(days=days)),
                            bins=None if log.bins is None else log.bins.set_axis(log.bins.index + pd.Timedelta(days=days)))
        notes[name] = f"shifted {days // 7:+d} weeks ({log.start:%Y-%m-%d} -> {out[name].start:%Y-%m-%d}, same weekday)"
    return out, notes


def common_window(logs: dict[str, LoadLog], test_start: pd.Timestamp) -> tuple[int, dict[str, int]]:
    """(test minutes every log has from ``test_start``, each log's index of ``test_start``)."""
    idx = {n: int((test_start - log.start) / pd.Timedelta(minutes=1)) for n, log in logs.items()}
    bad = [n for n, i in idx.items() if i < 1 or i >= logs[n].minutes]
    if bad:
        raise InputError(f"--test-start {test_start} lies outside the aligned logs of {bad}: "
                         + "; ".join(f"{n}: {logs[n].start} .. {logs[n].start + pd.Timedelta(minutes=logs[n].minutes)}"
                                     for n in bad))
    return min(logs[n].minutes - i for n, i in idx.items()), idx


def oracle_gpu_hours(members: Sequence[NodeMember], arrivals: dict[str, np.ndarray], p: NodeParams) -> float:
    """Each minute's true need per deployment, summed in GPUs and rounded up to whole nodes."""
    gpus = sum(oracle_need(arrivals[m.name].sum(axis=1), m.capacity_rpm, m.min_replicas, m.max_replicas) * m.gpus
               for m in members)
    return float(np.ceil(gpus / p.gpus_per_node).sum() * p.gpus_per_node / 60.0)


def late_share(run: NodesRun, name: str, demand: np.ndarray) -> float:
    total = float(demand.sum())
    return float(run.runs[name].late.sum()) / total if total > 0 else 0.0


@dataclass
class Inputs:
    """The test part of every member: arrivals (minutes x steps), the minute before, the minutes' times,
    and each member's core policy factory (a function of the cold start it plans)."""

    arrivals: dict[str, np.ndarray]
    before: dict[str, float]
    times: list
    cores: dict[str, Callable[[float, Optional[float]], CorePolicy]]


def run_policy(policy: str, members: Sequence[NodeMember], inp: Inputs, p: NodeParams, balloons: int = 0,
               fill: bool = False, knobs: Optional[dict[str, dict[str, float]]] = None,
               pool_quantile: float = 0.95) -> NodesRun:
    """One policy over the pool; ``knobs``: each deployment's own (the HPA's ``target_utilisation``,
    the core's ``quantile`` and ``reactive_guard``; ``warmup.sim.nodes_tune``), else the defaults
    (80%, the deployment's quantile, no guard); ``pool_quantile``: the level of the pooled demand
    warmcast's warm GPUs cover."""
    ms, forecast_at, utilisation, knobs = [], {}, {}, knobs or {}
    for m in members:
        lead = int(math.ceil(m.instance_lead_min - 1e-9))
        own = knobs.get(m.name) or {}
        if policy in ("hpa", "hpa_balloons"):
            pol = ReactiveHPA(m.capacity_rpm, own.get("target_utilisation", 0.8), 5, m.min_replicas, m.max_replicas)
        else:   # the core plans the node lead too where no warm GPU is kept for it
            pol = inp.cores[m.name](m.instance_lead_min + (p.node_lead_min if policy == "per_deployment_warmcast"
                                                           else 0.0), own)
            forecast_at[m.name] = pol.forecast_at
            utilisation[m.name] = holding_utilisation(pol.cfg.scaling.reactive_guard, pol.cfg.scaling.target_utilisation)
        first = max(m.min_replicas, math.ceil(max(inp.before[m.name], 0.0) / m.capacity_rpm))
        ms.append(Member(m.name, pol, inp.arrivals[m.name], m.capacity_rpm, m.gpus, lead, first, inp.before[m.name],
                         m.wait_s))
    rule = None
    if policy == "hpa_balloons":
        rule = FixedBalloons(balloons)
    elif policy == "warmcast":
        rule = FleetDecision(_pool_cfg(p, pool_quantile), lambda t: inp.times[t], forecast_at, utilisation)
    return run_nodes(ms, p, rule, fill=fill)


def _pool_cfg(p: NodeParams, quantile: float):
    from warmup.core.nodes import NodePoolConfig

    return NodePoolConfig("pool", p.gpus_per_node, p.node_lead_min, p.max_nodes, quantile)


def core_policy(cfg: CoreConfig, times: list, levels: tuple[float, ...], paths: dict,
                model: str) -> Callable[[float, Optional[dict[str, float]]], CorePolicy]:
    """A factory of the member's CorePolicy planning a given cold start with given scaling knobs
    (``quantile``, ``reactive_guard``; absent: the configuration's), its forecasts fixed."""
    def make(cold_start_min: float, knobs: Optional[dict[str, float]] = None) -> CorePolicy:
        c = replace(cfg, scaling=replace(cfg.scaling, cold_start_min=cold_start_min, **(knobs or {})))
        return CorePolicy(c, times, levels, paths, name="predictive", model=model)
    return make


def row(run: NodesRun, members: Sequence[NodeMember], inp: Inputs, hindsight: bool = False) -> dict:
    """A policy's report row: node and batch GPU-hours, each deployment's late share and SLO."""
    deps = {}
    for m in members:
        share = late_share(run, m.name, inp.arrivals[m.name].sum(axis=1))
        deps[m.name] = {"late_share": share, **({} if hindsight else {"slo_met": share <= m.late_share})}
    return {"node_gpu_hours": round(run.pool.gpu_hours(), 3), "batch_gpu_hours": round(max(0.0, run.pool.batch_gpu_hours()), 3),
            "idle_gpu_hours": round(float(run.free.sum()) / 60.0, 3),
            "node_launches": run.pool.node_launches, "preemptions": run.pool.preemptions,
            "unplaced": run.pool.unplaced, **({"hindsight": True} if hindsight else {}), "deployments": deps}


def tuned_balloons(members: Sequence[NodeMember], inp: Inputs, p: NodeParams,
                   knobs: Optional[dict[str, dict[str, float]]] = None) -> tuple[int, NodesRun, dict[int, list]]:
    """The fixed balloon count tuned on the test days (hindsight): the most deployments within their
    SLO, then the fewest node GPU-hours; with every count tried (count -> [node GPU-hours, SLOs met]:
    how much warm GPUs change the HPA's lateness on this fleet)."""
    best, tried = None, {}
    for k in BALLOON_GRID:
        run = run_policy("hpa_balloons", members, inp, p, balloons=k, knobs=knobs)
        met = sum(late_share(run, m.name, inp.arrivals[m.name].sum(axis=1)) <= m.late_share for m in members)
        key = (-met, run.pool.gpu_hours())
        tried[k] = [round(run.pool.gpu_hours(), 1), int(met)]
        if best is None or key < best[0]:
            best = (key, k, run)
    return best[1], best[2], tried


def run_all(members: Sequence[NodeMember], inp: Inputs, p: NodeParams, fill: bool,
            knobs: Optional[dict[str, dict[str, dict[str, float]]]] = None,
            pool_quantile: float = 0.95) -> tuple[dict, dict]:
    """Every policy on the pool: (report's ``policies``, their runs for the picture); ``knobs`` per
    policy and deployment and warmcast's ``pool_quantile`` (chosen before the test:
    ``warmup.sim.nodes_tune``)."""
    knobs = knobs or {}
    runs = {name: run_policy(name, members, inp, p, fill=fill and name == "warmcast", knobs=knobs.get(name),
                             pool_quantile=pool_quantile)
            for name in ("warmcast", "hpa", "per_deployment_warmcast")}
    k, runs["hpa_balloons"], tried = tuned_balloons(members, inp, p, knobs.get("hpa"))
    rows = {name: row(r, members, inp, hindsight=name == "hpa_balloons") for name, r in runs.items()}
    rows["hpa_balloons"]["balloons"], rows["hpa_balloons"]["balloons_tried"] = k, tried
    rows["warmcast"]["pool_quantile"] = pool_quantile
    for name in rows:
        if knobs.get("hpa" if name == "hpa_balloons" else name):
            rows[name]["knobs"] = knobs["hpa" if name == "hpa_balloons" else name]
    rows["oracle"] = {"node_gpu_hours": round(oracle_gpu_hours(members, inp.arrivals, p), 3), "batch_gpu_hours": 0.0,
                      "deployments": {m.name: {"late_share": 0.0, "slo_met": True} for m in members}}
    return rows, runs
