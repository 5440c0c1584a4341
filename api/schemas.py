"""Request and response bodies: the OpenAPI document is generated from these."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(BaseModel):
    detail: Any


class DeploymentOut(_Out):
    name: str
    configured: bool = Field(description="present in the deployments file (plans, switches, KEDA need it)")
    has_load: bool
    paused: bool
    model: Optional[str] = None
    gpus_per_replica: Optional[int] = None
    min_replicas: Optional[int] = None
    max_replicas: Optional[int] = None
    cold_start_min: Optional[float] = None
    default_profile: Optional[str] = None
    profiles: dict[str, float] = Field(default_factory=dict, description="profile -> capacity_rpm per instance")
    capacity_sources: dict[str, str] = Field(default_factory=dict,
                                             description="profile -> calibrated (measured, issue 15) or declared")


class DeploymentsOut(_Out):
    deployments: list[DeploymentOut]


AGE = "seconds since the document these numbers come from was made (null: it has no stamp)"
STALE = ("true past WARMCAST_API_PLAN_MAX_AGE_S: the workers stopped renewing it; the KEDA routes refuse "
         "it then (api/staleness.py)")


class ForecastOut(_Out):
    deployment: str
    source: Literal["stored", "computed"] = Field(description="stored by the workers, or computed now by the API")
    origin: str = Field(description="first forecast minute, 'YYYY-MM-DD HH:MM:SS' UTC")
    created_at: Optional[str]
    model: str
    version: str
    trained_at: Optional[str] = Field(description="when the serving model was trained/saved (None: baseline fitted now)")
    note: str
    horizon: int
    times: list[str]
    mean: list[float]
    quantiles: dict[str, list[float]] = Field(description="level ('0.1', '0.5', ...) -> requests per lead (see unit)")
    resolution_min: int = Field(1, description="minutes per lead: the stored series' resolution (5 for 5-minute counts)")
    unit: str = Field("requests/min", description="what one value is: 'requests/min' or 'requests per 5 min'")
    age_s: Optional[float] = Field(None, description=AGE)
    stale: bool = Field(False, description=STALE)


class PlanOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    deployment: str
    source: Literal["stored", "computed"]
    age_s: Optional[float] = Field(None, description=AGE + " (the older of the plan and its forecast)")
    stale: bool = Field(False, description=STALE)


class HourOut(_Out):
    start: str
    demand_p50_rpm: float
    demand_rpm: float
    replicas: int
    gpu_hours: float
    source: str
    capacity_rpm: float = Field(description="requests/min per instance this hour: its active profile's, or the one asked")
    profile: Optional[str] = Field(None, description="profile(s) the schedule makes active this hour ('+'-joined "
                                   "where a window starts or ends in it); null when capacity_per_instance was given")


class CapacityOut(_Out):
    deployment: str
    span: Literal["day", "week"]
    quantile: float
    utilisation: float
    capacity_per_instance: float = Field(description="the one asked for, else the default profile's; each hour's "
                                         "is hours[].capacity_rpm")
    gpus_per_replica: int
    method: str
    notes: list[str]
    history_minutes: int
    total_gpu_hours: float
    peak_replicas: int
    hours: list[HourOut]


Policy = Literal["static", "reactive", "queue", "predictive", "oracle"]


class WhatIfIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # JSON numbers are finite
    policies: list[Policy] = Field(default_factory=lambda: ["reactive", "predictive", "oracle"], min_length=1,
                                   max_length=5)
    test_start: datetime = Field(description="start of the replayed part; data before it trains the forecaster")
    capacity_rpm: Optional[float] = Field(None, ge=0.001, le=1e7, description="default: the deployment's profile")
    cold_start_min: Optional[float] = Field(None, ge=0, le=240,
                                            description="default: the planner's lead (measured launch-to-ready "
                                                        "first), named in the report")

    @field_validator("test_start")
    @classmethod
    def _test_start_bounded(cls, v: datetime) -> datetime:
        """A replay starts between 1971 and tomorrow: anything else names no load warmcast can hold, and
        was queued to fail in the worker (issue 31)."""
        utc = v.astimezone(timezone.utc) if v.tzinfo else v.replace(tzinfo=timezone.utc)
        now = datetime.now(timezone.utc)
        if not datetime(1971, 1, 1, tzinfo=timezone.utc) <= utc <= now.replace(microsecond=0) + timedelta(days=1):
            raise ValueError(f"test_start {v.isoformat()} must lie between 1971-01-01 and tomorrow (UTC)")
        return v


class JobOut(_Out):
    job_id: str
    deployment: str
    status: str = Field(description="Celery state: PENDING, STARTED, RETRY, SUCCESS, FAILURE")
    submitted_at: str
    source: str
    policies: list[str]
    result: Optional[dict[str, Any]] = None
    error: Optional[str] = None


class AuditEntry(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    ts: str
    kind: str
    decision: str
    reason: str
    applied: bool
    outcome: str = ""
    inputs: dict[str, Any] = Field(default_factory=dict)


class AuditOut(_Out):
    deployment: str
    entries: list[AuditEntry]


# One minute of load posted by a client; not the simulator's controller view (warmup.sim.fleet.Observation).
class LoadObservation(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # JSON numbers are finite
    time: datetime = Field(description="a whole UTC minute (naive times are UTC)")
    requests: float = Field(ge=0, le=1e9)
    input_tokens: Optional[float] = Field(None, ge=0, le=1e13)
    output_tokens: Optional[float] = Field(None, ge=0, le=1e13)
    ctx_mean: Optional[float] = Field(None, ge=0, le=1e8)
    ctx_p95: Optional[float] = Field(None, ge=0, le=1e8)

    @field_validator("time")
    @classmethod
    def _whole_minute(cls, v: datetime) -> datetime:
        # Outside this range a time zone shift can overflow datetime, and pandas cannot hold it.
        if not 1970 <= v.year <= 2200:
            raise ValueError("year must be between 1970 and 2200")
        if v.tzinfo is not None:  # store UTC, tz-naive, like every series in warmcast
            v = v.astimezone(timezone.utc).replace(tzinfo=None)
        if v.second or v.microsecond:
            raise ValueError("must be a whole minute (seconds = 0)")
        if not 1970 <= v.year <= 2200:
            raise ValueError("year must be between 1970 and 2200")
        return v


class ObservationsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    observations: list[LoadObservation] = Field(min_length=1)


class ObservationsOut(_Out):
    deployment: str
    written: int
    first: str
    last: str


class ProfileIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    profile: str = Field(min_length=1, max_length=64)


class PauseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500)


class ActionOut(_Out):
    deployment: str
    action: str
    detail: str
    audit_id: str


class KedaOut(_Out):
    deployment: str
    desiredReplicas: int
    forecastDemandRpm: float
    forecastReplicas: int
    plannedReplicas: Optional[int]
    quantile: float
    leadMinutes: int
    leadSource: str = Field("deployments file", description="where the lead's cold start comes from: measured launches, "
                            "measure-coldstart record, deployments file (as the workers' planner), or request")
    utilisation: float
    capacityPerInstanceRpm: float
    capacitySource: str = Field("declared", description="where capacityPerInstanceRpm comes from: calibrated or declared")
    profile: str
    peakAt: Optional[str]
    forecastOrigin: str
    forecastSource: str
    model: str
    paused: bool
    forecastAgeSeconds: float


class HealthOut(_Out):
    status: str
    checks: dict[str, Any] = Field(default_factory=dict)


class Series(_Out):
    times: list[str]
    values: list[Optional[float]]


class ReplicaPoint(_Out):
    time: str
    desired: Optional[int]
    actual: Optional[int]


class EventOut(_Out):
    time: str
    category: Literal["warmup", "scale", "switch", "manual", "alert"]
    kind: str
    decision: str
    reason: str


class DashboardOut(_Out):
    deployment: str
    now: str
    load: Series
    forecast: Optional[ForecastOut]
    replicas: list[ReplicaPoint]
    planned: list[ReplicaPoint]
    events: list[EventOut]
    paused: bool
    notes: list[str]
    unit: str = Field("requests/min", description="what one load or forecast value is: 'requests/min', or "
                      "'requests per 5 min' for a deployment stored in 5-minute bins")
