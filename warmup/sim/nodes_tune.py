"""The node-pool backtest's knobs chosen per deployment before the test (issue 45: "baselines, each
SLO-tuned the same way as today"), on the validation days before the test start.

Each candidate setting runs the whole pool (the deployments share its nodes) with every deployment
at that setting; each deployment then takes the setting that kept it within its own SLO on those
days at the fewest GPU-hours of its own instances, else the one that left it least late.  The
core's settings pair a quantile with the reactive guard (the HPA it never holds fewer instances
than), as ``bench/fleet_slo.py`` and the live retune search them: without the guard, a quantile of
a noisy per-minute forecast either misses rises inside the instance lead or holds its whole spread
(bench:nodes, 2026-12-06: the core was tuned on its quantile alone and met 1 SLO of 4).  Nothing
from the test days is read.
"""
from __future__ import annotations

from typing import Sequence

from warmup.sim.nodes import NodeParams
from warmup.sim.nodes_backtest import Inputs, NodeMember, late_share, run_policy

Knobs = dict[str, float]
HPA_UTILISATION = (0.9, 0.8, 0.7, 0.6, 0.5)
CORE_QUANTILE = (0.5, 0.7, 0.9, 0.95, 0.99)
CORE_GUARD = (None, 0.9, 0.8, 0.7, 0.6, 0.5)     # the reactive guard's target utilisation (None: off)
HPA_GRID: tuple[Knobs, ...] = tuple({"target_utilisation": u} for u in HPA_UTILISATION)
CORE_GRID: tuple[Knobs, ...] = tuple({"quantile": q, "reactive_guard": g} for q in CORE_QUANTILE[:3]
                                     for g in CORE_GUARD) + tuple({"quantile": q} for q in CORE_QUANTILE[3:])
POOL_QUANTILE = (0.5, 0.7, 0.9, 0.95, 0.99)      # the pooled demand's level warmcast's warm GPUs cover
GRIDS = {"hpa": HPA_GRID, "warmcast": CORE_GRID, "per_deployment_warmcast": CORE_GRID}


def tune(policy: str, members: Sequence[NodeMember], val: Inputs, p: NodeParams) -> dict[str, Knobs]:
    """Each deployment's knobs for ``policy``, chosen on the validation inputs ``val``."""
    grid = GRIDS[policy]
    scores: list[dict[str, tuple[float, float]]] = []   # per setting: deployment -> (late share, GPU-hours)
    for knobs in grid:
        run = run_policy(policy, members, val, p, knobs={m.name: knobs for m in members})
        scores.append({m.name: (late_share(run, m.name, val.arrivals[m.name].sum(axis=1)),
                                float(run.runs[m.name].provisioned.sum()) * m.gpus / 60.0) for m in members})
    choice = {}
    for m in members:
        within = [i for i in range(len(grid)) if scores[i][m.name][0] <= m.late_share]
        best = (min(within, key=lambda i: (scores[i][m.name][1], i)) if within
                else min(range(len(grid)), key=lambda i: (*scores[i][m.name], i)))
        choice[m.name] = dict(grid[best])
    return choice


def tune_all(members: Sequence[NodeMember], val: Inputs, p: NodeParams) -> dict[str, dict[str, Knobs]]:
    """Every tuned policy's knobs per deployment (the balloons' baseline takes the HPA's)."""
    return {policy: tune(policy, members, val, p) for policy in GRIDS}


def tune_pool(members: Sequence[NodeMember], val: Inputs, p: NodeParams, knobs: dict[str, Knobs]) -> float:
    """warmcast's pool quantile on the validation days, its deployments at their tuned ``knobs``: the
    most deployments within their SLO, then the fewest node GPU-hours (the rule that tunes baseline
    (b)'s balloon count, here before the test)."""
    def key(q: float) -> tuple[int, float]:
        run = run_policy("warmcast", members, val, p, knobs=knobs, pool_quantile=q)
        met = sum(late_share(run, m.name, val.arrivals[m.name].sum(axis=1)) <= m.late_share for m in members)
        return -met, run.pool.gpu_hours()
    return min(POOL_QUANTILE, key=key)
