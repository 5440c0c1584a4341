"""The node-pool backtest's knobs chosen per deployment before the test (issue 45: "baselines, each
SLO-tuned the same way as today"), on the validation days before the test start.

Each candidate value runs the whole pool (the deployments share its nodes) with every deployment at
that value; each deployment then takes the cheapest value that kept it within its own SLO on those
days, else the one that left it least late.  Cheapest: the HPA's highest target utilisation, the
core's lowest quantile (fewer instances either way).  Nothing from the test days is read.
"""
from __future__ import annotations

from typing import Sequence

from warmup.sim.nodes import NodeParams
from warmup.sim.nodes_backtest import Inputs, NodeMember, late_share, run_policy

HPA_UTILISATION = (0.9, 0.8, 0.7, 0.6, 0.5)        # cheapest first
CORE_QUANTILE = (0.5, 0.7, 0.9, 0.95, 0.99)         # cheapest first
GRIDS = {"hpa": HPA_UTILISATION, "warmcast": CORE_QUANTILE, "per_deployment_warmcast": CORE_QUANTILE}


def tune(policy: str, members: Sequence[NodeMember], val: Inputs, p: NodeParams) -> dict[str, float]:
    """Each deployment's knob for ``policy``, chosen on the validation inputs ``val``."""
    grid = GRIDS[policy]
    shares = {}
    for v in grid:
        run = run_policy(policy, members, val, p, knobs={m.name: v for m in members})
        shares[v] = {m.name: late_share(run, m.name, val.arrivals[m.name].sum(axis=1)) for m in members}
    choice = {}
    for m in members:
        ok = [v for v in grid if shares[v][m.name] <= m.late_share]
        choice[m.name] = ok[0] if ok else min(grid, key=lambda v: (shares[v][m.name], grid.index(v)))
    return choice


def tune_all(members: Sequence[NodeMember], val: Inputs, p: NodeParams) -> dict[str, dict[str, float]]:
    """Every tuned policy's knobs per deployment (the balloons' baseline takes the HPA's)."""
    return {policy: tune(policy, members, val, p) for policy in GRIDS}
