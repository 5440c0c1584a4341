"""``GET /v1/deployments/{deployment}/advice/profiles``: the profile advisor for planners (the same
advice ``warmcast advise profiles`` prints: windows, engine args with reasons, the fragment)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from api.deps import ApiContext, get_ctx, known_deployment, require_read
from api.routes import READ_ERR

router = APIRouter(prefix="/v1", dependencies=[Depends(require_read)], tags=["read"])


class AdvisedWindow(BaseModel):
    profile: str
    start: str = Field(description="HH:MM in the schedule's time zone; start == end: all day")
    end: str
    requests: float
    ctx_mean: Optional[float] = Field(None, description="mean prompt tokens in the window")
    ctx_p50: Optional[float] = None
    ctx_p95: Optional[float] = None
    engine_args: dict[str, Any]
    swap_gb: float = Field(description="max(20 GB, 0.3 x weight memory); set only where vLLM has --swap-space")
    reasons: list[str]


class Prewarm(BaseModel):
    profile: str
    start: str = Field(alias="from", description="HH:MM the pre-warm of this profile starts")


class ProfileAdviceOut(BaseModel):
    deployment: str
    timezone: str
    windows: list[AdvisedWindow]
    default_profile: str
    prewarm: list[Prewarm]
    cold_start_min: float
    reasons: list[str]
    hourly_ctx_mean: list[Optional[float]] = Field(description="mean prompt tokens per local hour 0..23")
    fragment: str = Field(description="deployments-file YAML, reasons as comments, ready to paste")


@router.get("/deployments/{deployment}/advice/profiles", response_model=ProfileAdviceOut, responses=READ_ERR,
            response_model_by_alias=True,
            summary="Profiles per daily window where the context length shifts, with engine args and reasons")
def get_profile_advice(
    deployment: Annotated[str, Depends(known_deployment)],
    ctx: Annotated[ApiContext, Depends(get_ctx)],
    memory_gb: Optional[float] = Query(None, ge=1, le=4096, description="accelerator memory per instance"),
    weights_gb: Optional[float] = Query(None, gt=0, le=4096, description="model weight memory"),
    kv_bytes_per_token: float = Query(131072.0, ge=1, le=1e8, description="KV cache bytes per token"),
) -> dict[str, Any]:
    from warmup.planning.advisor_io import advise, deployment_or_bare

    dep = deployment_or_bare(ctx.fleet, deployment)
    return advise(ctx.store, dep, datetime.now(timezone.utc), memory_gb=memory_gb, weights_gb=weights_gb,
                  kv_bytes_per_token=kv_bytes_per_token).as_doc()
