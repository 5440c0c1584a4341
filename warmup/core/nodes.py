"""Warm GPUs per node pool (issue 45): how many free GPUs a pool holds on running nodes (balloons)
so that its deployments' launches over the next node lead find a GPU and start in their instance
lead instead of waiting for a node.  Pure: the forecasts, the pool's fleet and ``now`` come in; a
decision with its reason goes out.

The headroom is the fleet's quantile of the *sum* of its deployments' demand, not the sum of their
quantiles: bursts and forecast errors of many deployments do not peak together.  Each deployment's
forecast at a minute is read as a normal law (its P50, and the spread between P50 and its highest
level up to the pool's quantile); the deployments' errors are taken as independent, so the sum's
spread is the root of the summed squares.  Both are stated assumptions of this first rule, and the
reason says them.  Demand is in GPUs: requests/min over what an instance serves at the utilisation
the deployment holds its instances at (its reactive guard's target, else full capacity), times its
GPUs; at full capacity the pooled need sits below what deployments scaled at 70% already hold, and
the pool kept no warm GPU at all (bench:nodes, 2026-12-06).

Stages (each returns its part of the reason): ``member_paths`` (each deployment's GPU demand over
the node lead), ``pooled_need`` (the sum's quantile, its peak minute), ``bounded`` (what the pool's
``max_nodes`` leaves), ``stabilised`` (scale-in waits ``stabilise_min`` of lower targets, as the
HPA's scale-down window does).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from statistics import NormalDist
from typing import Optional

from warmup.core.inputs import ForecastInput, level_value

_Z = NormalDist()


@dataclass(frozen=True)
class NodePoolConfig:
    name: str
    gpus_per_node: int
    node_lead_min: float
    max_nodes: int
    quantile: float = 0.95           # the level of the pooled demand the warm GPUs cover
    stabilise_min: int = 10          # fewer warm GPUs only after this many minutes of lower targets


@dataclass(frozen=True)
class Member:
    """One deployment on the pool: its forecast (requests/min), capacity and GPUs per instance, and
    the GPUs its instances hold now (running and booting)."""

    deployment: str
    forecast: Optional[ForecastInput]
    capacity_rpm: float
    gpus_per_instance: int
    gpus_held: int
    utilisation: float = 1.0         # the share of capacity its instances are held at (holding_utilisation)


def holding_utilisation(reactive_guard: Optional[float], target_utilisation: float = 1.0) -> float:
    """The utilisation a deployment holds its instances at: its reactive guard's target where it has
    one (it never holds fewer than that HPA), else its target utilisation."""
    return float(reactive_guard) if reactive_guard else float(target_utilisation)


@dataclass(frozen=True)
class PoolInput:
    now: datetime
    members: tuple[Member, ...]
    nodes_up: int                    # nodes running or booting


@dataclass(frozen=True)
class PoolState:
    recent: tuple[tuple[int, int], ...] = ()   # (minute, target) of the last stabilise_min minutes


@dataclass(frozen=True)
class PoolDecision:
    pool: str
    warm_gpus: int                   # free GPUs to hold on running nodes (the balloons' count)
    nodes_wanted: int                # nodes for what the instances hold plus the warm GPUs
    reason: str
    state: PoolState = field(default_factory=PoolState)
    members: tuple[tuple[str, float], ...] = ()   # each deployment's own need at the pool's level (GPUs)


@dataclass(frozen=True)
class Law:
    """The pooled GPU demand at one minute: mean and spread of a normal law."""

    mean: float
    sd: float


def member_laws(m: Member, q: float, steps: int, now: datetime) -> list[Law]:
    """``m``'s GPU demand per minute over the ``steps`` minutes from ``now`` (empty without a usable
    forecast, or one that ended before ``now``)."""
    fc = m.forecast
    if fc is None or not fc.levels or m.capacity_rpm <= 0 or not fc.usable():
        return []
    hi = max((lv for lv in fc.levels if 0.5 < lv <= q), default=None)
    per = m.gpus_per_instance / (m.capacity_rpm * min(1.0, max(m.utilisation, 1e-3)))
    start = fc.offset(now)
    out = []
    for t in range(start, min(start + steps, fc.horizon)):
        col = tuple(path[t] for path in fc.values)
        mid = level_value(fc.levels, col, 0.5) if fc.covers(0.5) else col[0]
        sd = 0.0 if hi is None else max(0.0, level_value(fc.levels, col, hi) - mid) / _Z.inv_cdf(hi)
        out.append(Law(max(0.0, mid) * per, sd * per))
    return out


def pooled_need(members: tuple[Member, ...], cfg: NodePoolConfig, now: datetime) -> tuple[float, int, str]:
    """(peak GPUs the pooled demand needs at the pool's level over the node lead, its minute, why)."""
    steps = max(1, math.ceil(cfg.node_lead_min))
    laws = [member_laws(m, cfg.quantile, steps, now) for m in members]
    n = max((len(x) for x in laws), default=0)
    if n == 0:
        return 0.0, 0, "no forecast on the pool: no warm GPUs held ahead"
    z = _Z.inv_cdf(cfg.quantile)
    need = []
    for t in range(n):
        mean = sum(x[t].mean for x in laws if t < len(x))
        var = sum(x[t].sd ** 2 for x in laws if t < len(x))
        need.append(mean + z * math.sqrt(var))
    peak = max(range(n), key=need.__getitem__)
    why = (f"P{cfg.quantile * 100:g} of the pooled demand of {sum(1 for x in laws if x)} deployment(s) "
           f"peaks at {need[peak]:.1f} GPUs in {peak + 1} min (within the {cfg.node_lead_min:g}-min node "
           "lead; normal laws, independent errors)")
    return need[peak], peak, why


def bounded(want: int, held: int, cfg: NodePoolConfig) -> tuple[int, str]:
    """Warm GPUs within what ``max_nodes`` leaves beside the GPUs the instances hold."""
    room = max(0, cfg.max_nodes * cfg.gpus_per_node - held)
    if want > room:
        return room, f"capped at {room}: max_nodes {cfg.max_nodes} x {cfg.gpus_per_node} GPUs less {held} held"
    return want, ""


def stabilised(want: int, minute: int, state: PoolState, cfg: NodePoolConfig) -> tuple[int, PoolState, str]:
    """Hold the highest target of the last ``stabilise_min`` minutes (scale-in waits; scale-out at once)."""
    recent = tuple((m, v) for m, v in state.recent if m > minute - cfg.stabilise_min) + ((minute, want),)
    held = max(v for _, v in recent)
    why = f"held at {held}: scale-in waits {cfg.stabilise_min} min of lower targets" if held > want else ""
    return held, PoolState(recent), why


def decide_pool(cfg: NodePoolConfig, inp: PoolInput, state: PoolState) -> PoolDecision:
    """The pool's warm GPUs and nodes this minute, with the reason for each number."""
    held = sum(m.gpus_held for m in inp.members)
    need, _, why = pooled_need(inp.members, cfg, inp.now)
    want = max(0, math.ceil(need - 1e-9) - held)
    minute = int(inp.now.timestamp() // 60)
    kept, new_state, stab = stabilised(want, minute, state, cfg)
    warm, cap = bounded(kept, held, cfg)
    nodes = math.ceil((held + warm) / cfg.gpus_per_node) if held + warm else 0
    parts = [why, f"{held} GPU(s) held by instances, so {max(0, math.ceil(need - 1e-9) - held)} warm", stab, cap]
    own = tuple((m.deployment, round(pooled_need((m,), cfg, inp.now)[0], 2)) for m in inp.members)
    return PoolDecision(cfg.name, warm, nodes, "; ".join(p for p in parts if p), new_state, own)
