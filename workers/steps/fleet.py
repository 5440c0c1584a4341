"""The fleet tick (issue 45): per node pool, the warm GPUs to hold from the forecasts of every
deployment on it (``warmup.core.nodes.decide_pool``, pure), stored with its reason, audited, shown
in /metrics and ``GET /v1/fleet``, and applied to the pool's balloon Deployment through the scale
subresource (``node_pools[].balloon``; docs/k8s/node-pools.yaml).

It reads what the deployments' own ticks read (the stored forecast, the signals' provisioned
instances) and runs after them in the same slot, so the pool sizes for the instances those ticks
just asked for.  Forecast-only mode, a pool without a balloon and the simulated fleet decide and
audit the same way and apply nothing; the audit says why.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

from warmcast.config.node_pools import NodePool
from warmup.core.lead import Lead, choose_node_lead
from warmup.core.nodes import (Member, NodePoolConfig, PoolDecision, PoolInput, PoolState, decide_pool,
                               holding_utilisation)
from workers import metrics
from workers.context import Ctx
from workers.steps import forecast
from workers.steps.outcome import Outcome

KIND = "node-pool"        # the state document of a pool's last decision
STATE = "node-pool-state"  # the pool's stabilisation memory


@dataclass(frozen=True)
class FleetOutcome(Outcome):
    pools: dict[str, int] = field(default_factory=dict)   # pool -> warm GPUs decided


def pool_config(pool: NodePool, lead_min: Optional[float] = None) -> NodePoolConfig:
    return NodePoolConfig(pool.name, pool.gpus_per_node, lead_min or pool.node_lead_min, pool.max_nodes,
                          pool.quantile, pool.stabilise_min)


def members(ctx: Ctx, pool: NodePool) -> tuple[Member, ...]:
    """Every deployment on ``pool`` as the core sees it: forecast, capacity, GPUs per instance, GPUs held."""
    out = []
    for d in ctx.deployments():
        if d.node_pool != pool.name:
            continue
        _, fc = forecast.stored(ctx, d.name)
        sig = ctx.state.get("signals", d.name) or {}
        held = int(sig.get("provisioned") or 0) * d.gpus_per_replica
        sc = ctx.cfg(d.name).scaling
        out.append(Member(d.name, fc, float(sc.capacity_rpm), d.gpus_per_replica, held,
                          holding_utilisation(sc.reactive_guard, sc.target_utilisation)))
    return tuple(out)


def pool_lead(ctx: Ctx, pool: NodePool, api_client: Any = None) -> Lead:
    """The node lead: measured from the pool's node objects where it names a ``node_selector`` and
    the fleet is real, else the declared ``node_lead_min``; an unreadable API falls back and says why."""
    if ctx.simulate or not pool.node_selector:
        return choose_node_lead([], pool.node_lead_min)
    from warmup.actuators.nodes import node_lead

    try:
        return node_lead(api_client, pool.node_selector, pool.node_lead_min)
    except Exception as err:  # noqa: BLE001 - the declared lead is the plan's fallback, said in the reason
        declared = choose_node_lead([], pool.node_lead_min)
        return Lead(declared.cold_start_min, declared.source, f"node objects unreadable ({type(err).__name__})")


def decide(ctx: Ctx, pool: NodePool, now: datetime, lead: Lead) -> PoolDecision:
    """The pool's decision at ``now`` from the stored inputs and its stabilisation memory."""
    raw = ctx.state.get(STATE, pool.name) or {}
    state = PoolState(tuple((int(m), int(v)) for m, v in raw.get("recent", [])))
    return decide_pool(pool_config(pool, lead.cold_start_min), PoolInput(now, members(ctx, pool), nodes_up=0), state)


def apply(ctx: Ctx, pool: NodePool, d: PoolDecision, api_client: Any = None) -> tuple[bool, str]:
    """Scale the pool's balloons to the warm GPUs (one GPU a replica); (applied, what happened)."""
    if ctx.settings.dry_run:
        return False, "forecast-only mode: balloons not scaled"
    if ctx.simulate:
        return False, "simulated fleet: no balloon Deployment to scale"
    if pool.balloon is None:
        return False, f"node pool {pool.name} names no balloon Deployment (node_pools[].balloon)"
    from warmup.actuators.scalers.kubernetes import KubernetesScaler

    scaler = KubernetesScaler(f"pool.{pool.name}", pool.balloon, pool.namespace, api_client=api_client)
    r = scaler.scale_to(d.warm_gpus, d.reason)
    return bool(r.applied), f"{pool.balloon}: {r.previous} -> {r.target}"


def step(ctx: Ctx, now: Optional[datetime] = None, api_client: Any = None) -> FleetOutcome:
    """Decide, store, apply and audit every node pool of the deployments file (``api_client``: the
    Kubernetes client; default the in-cluster or kubeconfig one)."""
    now = now or datetime.now(timezone.utc)
    decided = {}
    for pool in ctx.node_pools():
        lead = pool_lead(ctx, pool, api_client)
        d = decide(ctx, pool, now, lead)
        applied, outcome = apply(ctx, pool, d, api_client)
        doc = {"pool": pool.name, "gpu": pool.gpu, "warm_gpus": d.warm_gpus, "nodes_wanted": d.nodes_wanted,
               "reason": f"{d.reason} (node lead from {lead.source}: {lead.detail})", "node_lead": lead.as_doc(), "members": dict(d.members), "applied": applied, "outcome": outcome,
               "decided_at": now.timestamp(), "gpus_per_node": pool.gpus_per_node, "max_nodes": pool.max_nodes}
        ctx.state.put(KIND, pool.name, doc)
        ctx.state.put(STATE, pool.name, {"recent": [list(x) for x in asdict(d.state)["recent"]]})
        ctx.state.audit(audit_key(pool.name), "node-pool", f"warm GPUs {d.warm_gpus}, nodes {d.nodes_wanted}",
                        doc["reason"], applied, outcome=outcome, inputs={"members": dict(d.members)})
        metrics.POOL_WARM_GPUS.labels(pool.name).set(d.warm_gpus)
        metrics.POOL_NODES.labels(pool.name).set(d.nodes_wanted)
        decided[pool.name] = d.warm_gpus
    return FleetOutcome("fleet", decided)


def audit_key(pool: str) -> str:
    """A pool's audit stream: ``pool:NAME`` (a colon never appears in a deployment's name)."""
    return f"pool:{pool}"

