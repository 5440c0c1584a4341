"""``GET /v1/deployments/{deployment}/capacity/gpu-plan``: the capacity plan by GPU type and cost
(the same document ``warmcast plan capacity`` writes to plan.json)."""
from __future__ import annotations

from typing import Annotated, Any, Optional

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from api import service
from api.errors import FieldError
from api.deps import ApiContext, configured_deployment, get_ctx, require_read
from api.routes import READ_ERR
from warmcast.config.deployments import Deployment

router = APIRouter(prefix="/v1", dependencies=[Depends(require_read)], tags=["read"])


class GpuOptionOut(BaseModel):
    type: str
    capacity_rpm: float = Field(description="requests/min one instance serves at 100% utilisation")
    capacity_source: str = Field(description="calibration, declared, the profile's, or estimated (and from what)")
    cost_index: float
    max_instances: Optional[int] = None


class GpuSlotOut(BaseModel):
    start: str
    demand_rpm: float
    instances: dict[str, int] = Field(description="GPU type -> instances")
    capacity_rpm: float = Field(description="capacity of the mix at the target utilisation")
    gpus: int
    cost: float = Field(description="cost index x GPUs x hours of the slot")
    bound: str = Field(description="what decided the mix: slo, no demand, or the limit(s) that bound it")
    reason: str


class GpuPlanTotals(BaseModel):
    total_cost: float
    gpu_hours: float
    all_a100_cost: Optional[float] = Field(None, description="the same demand on A100-80G only, within the same "
                                           "limits (max_replicas, max_gpus, the type's availability)")
    saving_vs_all_a100: Optional[float] = Field(None, description="share of the all-A100 cost saved (0 when the "
                                                "plan is that fleet; negative when the plan costs more)")
    all_a100_short_slots: int = Field(0, description="slots where that all-A100 fleet misses the SLO")
    all_a100_is_plan: bool = Field(False, description="the plan is the all-A100 fleet: nothing saved")
    slots: list[GpuSlotOut]


class WhatIfOut(GpuPlanTotals):
    changes: dict[str, Any]
    delta_cost: float


class GpuPlanOut(GpuPlanTotals):
    deployment: str
    pool: Optional[str]
    profile: str
    horizon: str
    quantile: float
    utilisation: float
    method: str
    notes: list[str]
    options: list[GpuOptionOut]
    excluded: dict[str, str] = Field(description="GPU type -> why it is not an option (memory fit, no capacity)")
    what_if: Optional[WhatIfOut] = None


@router.get("/deployments/{deployment}/capacity/gpu-plan", response_model=GpuPlanOut, responses=READ_ERR,
            summary="Capacity plan by GPU type: cheapest mix per hour that meets the SLO, cost vs all-A100")
def get_gpu_plan(
    dep: Annotated[Deployment, Depends(configured_deployment)],
    ctx: Annotated[ApiContext, Depends(get_ctx)],
    horizon: str = Query("24h", pattern="^(24h|30m)$", description="24h: typical day from history; 30m: forecast"),
    pool: Optional[str] = Query(None, pattern="^(hot|cold)$", description="plan one pool's series and profile"),
    quantile: float = Query(0.9, ge=0.01, le=0.99),
    utilisation: Optional[float] = Query(None, ge=0.05, le=1, description="target utilisation (default: the pool's)"),
    growth: Optional[float] = Query(None, gt=0, le=100, description="what-if: demand multiplier, 1.3 = +30%"),
    types: Optional[str] = Query(None, max_length=200, pattern=r"^[A-Za-z0-9._,-]+$",
                                 description="what-if: only these GPU types, comma-separated"),
    what_if_utilisation: Optional[float] = Query(None, ge=0.05, le=1, description="what-if: another SLO"),
) -> dict[str, Any]:
    from warmup.planning.gpu_report import AskError, PlanAsk, build, stored_inputs

    ask = PlanAsk(horizon, quantile, utilisation, pool, None, growth,
                  tuple(t for t in types.split(",") if t) if types else None, what_if_utilisation)
    try:
        # the forecast /capacity plans with too: the newest, stored or computed on demand (issue 46)
        history, forecast = stored_inputs(ctx.store, ctx.state, dep, pool,
                                          forecast_doc=service.cached_or_stored(ctx, dep.name))
        return build(dep, history, forecast, ask)
    except AskError as err:  # a GET has no body: the error is located at the query parameter that asked
        raise FieldError(("query", _QUERY_NAME.get(err.field, err.field)), str(err)) from None


# PlanAsk's field -> this route's query parameter where the names differ
_QUERY_NAME = {"what_if_types": "types", "what_if_growth": "growth"}
