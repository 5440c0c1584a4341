"""``GET /v1/fleet``: every node pool's warm GPUs with the reason the fleet tick gave (issue 45;
``workers/steps/fleet.py`` decides and stores them), its nodes and each deployment's own need."""
from __future__ import annotations

import time
from typing import Any, Optional

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from api.deps import ApiContext, get_ctx, require_read
from api.routes import READ_ERR

router = APIRouter(prefix="/v1", dependencies=[Depends(require_read)], tags=["read"])


class PoolOut(BaseModel):
    pool: str
    gpu: str
    gpus_per_node: int
    max_nodes: int
    warm_gpus: Optional[int] = Field(None, description="free GPUs held on running nodes (balloons); null: not "
                                     "decided yet")
    nodes_wanted: Optional[int] = None
    reason: str
    members: dict[str, float] = Field(default_factory=dict, description="each deployment's own need at the "
                                      "pool's level (GPUs): their sum is what pooling saves against")
    applied: Optional[bool] = None
    outcome: str = ""
    age_s: Optional[float] = Field(None, description="seconds since the decision")


class FleetOut(BaseModel):
    pools: list[PoolOut]


@router.get("/fleet", response_model=FleetOut, responses=READ_ERR, summary="Node pools and their warm GPUs")
def fleet(ctx: ApiContext = Depends(get_ctx)) -> dict[str, Any]:
    from workers.steps.fleet import KIND

    out = []
    for pool in ctx.fleet.node_pools:
        doc = ctx.state.get(KIND, pool.name) or {}
        out.append({"pool": pool.name, "gpu": pool.gpu, "gpus_per_node": pool.gpus_per_node,
                    "max_nodes": pool.max_nodes, "warm_gpus": doc.get("warm_gpus"),
                    "nodes_wanted": doc.get("nodes_wanted"),
                    "reason": doc.get("reason") or "not decided yet: the fleet tick has not run for this pool",
                    "members": doc.get("members") or {}, "applied": doc.get("applied"),
                    "outcome": doc.get("outcome", ""),
                    "age_s": round(time.time() - float(doc["decided_at"]), 1) if doc else None})
    return {"pools": out}
