"""Node pools of the deployments file (``node_pools:``, issue 45): GPU nodes shared by every
deployment that names the pool, with their own cold start (the node lead) and limit.

A deployment names its pool (``node_pool:``) and holds ``gpus_per_replica`` GPUs per instance;
its instance lead stays its own (measured launches).  Kept apart from
:mod:`warmcast.config.deployments`, which holds the two fields and calls :func:`check_fleet`.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from warmcast.config.strict import MAX_INSTANCES, Strict

POOL_NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,62}\Z")


class NodePool(Strict):
    """GPU nodes of one type: how many GPUs a node has, how long a node takes from creation to Ready,
    how many the pool may hold, and what a GPU-hour costs."""

    name: str
    gpu: str = Field(min_length=1, max_length=64, description="the GPU type (an index of the GPU catalogue)")
    gpus_per_node: int = Field(ge=1, le=64)
    node_lead_min: float = Field(gt=0, le=240, description="declared minutes from node creation to Ready "
                                 "(a lead measured from node objects replaces it where the backend sees nodes)")
    max_nodes: int = Field(ge=1, le=MAX_INSTANCES)
    cost_per_gpu_hour: float | None = Field(None, gt=0, le=10_000)
    quantile: float = Field(0.95, ge=0.5, le=0.99, description="level of the pooled demand the warm GPUs cover")
    stabilise_min: int = Field(10, ge=0, le=1440, description="fewer warm GPUs only after this many minutes")
    node_selector: str | None = Field(None, max_length=300, description="label selector of the pool's node "
                                      "objects (e.g. karpenter.sh/nodepool=a100): the node lead is measured there")
    balloon: str | None = Field(None, pattern=r"^deployment/.+", description="deployment/NAME of the balloon pods "
                                "(docs/k8s/node-pools.yaml); one replica holds one warm GPU")
    namespace: str = Field("default", min_length=1, max_length=63)
    fill: bool = Field(False, description="the balloons run preemptible batch work (preempted by serving pods)")
    preempt_s: float = Field(30.0, ge=0, le=3600, description="batch work lost when a warm GPU is taken back")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not POOL_NAME_RE.fullmatch(v):
            raise ValueError("must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit")
        return v


def check_fleet(pools: list[NodePool], deployments: list[Any]) -> None:
    """Pool names unique; each deployment's ``node_pool`` one of them and its instance within a node.
    Raises ValueError naming the deployment and the field."""
    names = [p.name for p in pools]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"node_pools: names must be unique; repeated: {dup}")
    by_name = {p.name: p for p in pools}
    for d in deployments:
        if d.node_pool is None:
            continue
        pool = by_name.get(d.node_pool)
        if pool is None:
            raise ValueError(f"deployment {d.name}: node_pool {d.node_pool!r} is not one of node_pools "
                             f"{sorted(by_name)}")
        if d.gpus_per_replica > pool.gpus_per_node:
            raise ValueError(f"deployment {d.name}: gpus_per_replica {d.gpus_per_replica} (GPUs per instance) is "
                             f"above node pool {pool.name}'s gpus_per_node {pool.gpus_per_node}: no instance fits "
                             "on a node")
