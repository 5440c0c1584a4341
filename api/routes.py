"""Versioned routes for planners and operators (``/v1``)."""
from __future__ import annotations

import os
import re
import shutil
import uuid
from typing import Annotated, Any, Optional

import pandas as pd
from pydantic import ValidationError
from fastapi import APIRouter, Depends, File, Form, Path, Query, Request, Response, UploadFile

from api import ondemand, query, service
from api.deps import (ApiContext, check_known, check_known_async, check_read, configured_deployment, get_ctx, known_deployment, require_read,
                      require_write)
from api.errors import FieldError
from api.schemas import (ActionOut, AuditEntry, AuditOut, CapacityOut, DashboardOut, DeploymentOut, DeploymentsOut,
                         EventOut, ForecastOut, HourOut, JobOut, ObservationsIn, ObservationsOut, PauseIn, PlanOut,
                         Policy, ProfileIn, ReplicaPoint, Series, WhatIfIn)
from warmup.calibration.store import load_capacities
from warmcast.config.deployments import Deployment
from warmcast.errors import NotFoundError, WarmcastError
from warmcast.ingest.window import TimeWindowError

TS = service.TS


def _err(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "malformed request (body cannot be decoded)", 401: "missing bearer token", 403: "token not valid / writes disabled", 404: "unknown deployment or job",
            409: "the stored state cannot answer yet (the detail says what is missing)",
            413: "body over the size limit", 503: "Redis or workers unavailable"}
    return {c: {"description": text[c], "content": {"application/json": {"schema": {
        "type": "object", "properties": {"detail": {}}, "required": ["detail"]}}}} for c in codes}


READ_ERR = _err(401, 403, 404, 503)
WRITE_ERR = _err(400, 401, 403, 404, 413, 503)

read = APIRouter(prefix="/v1", dependencies=[Depends(require_read)], tags=["read"])
write = APIRouter(prefix="/v1", dependencies=[Depends(require_write)], tags=["write"])  # auth runs first

Dep = Annotated[str, Depends(known_deployment)]
ConfDep = Annotated[Deployment, Depends(configured_deployment)]
Ctx = Annotated[ApiContext, Depends(get_ctx)]
BY = "api"  # who acted, for the audit trail (one shared write token: no user names)
QuantilesQ = Query(None, max_length=80, description="comma-separated levels in (0, 1), e.g. 0.1,0.5,0.9",
                   examples=["0.1,0.5,0.9"])


EARLIEST = pd.Timestamp("1970-01-01")  # the load store counts days from the Unix epoch
AHEAD = pd.Timedelta(days=366)          # nothing warmcast plans or records lies further ahead


def _ts(raw: str | None, field: str, where: str = "query") -> str | None:
    """Normalise a user timestamp to 'YYYY-MM-DD HH:MM:SS' or fail naming the field.

    Bounded to [1970-01-01, now + 366 days]: work that walks from a timestamp to the
    data (the capacity plan's look-back) then stays bounded too (finding 3)."""
    if raw is None or raw == "":
        return None
    try:
        t = pd.Timestamp(raw)
        if t is not pd.NaT and t.tzinfo is not None:
            t = t.tz_convert("UTC").tz_localize(None)
    except (ValueError, TypeError, OverflowError, ArithmeticError, NotImplementedError):
        raise FieldError((where, field), f"{raw!r} is not a timestamp (use YYYY-MM-DD HH:MM:SS)") from None
    if t is pd.NaT or pd.isna(t):
        raise FieldError((where, field), f"{raw!r} is not a timestamp")
    latest = service.utcnow() + AHEAD
    if not EARLIEST <= t <= latest:
        raise FieldError((where, field), f"{raw!r} is outside {EARLIEST:%Y-%m-%d} .. {latest:%Y-%m-%d} "
                                         "(now + 366 days)")
    return t.strftime(TS)


# --------------------------------------------------------------------------- reads

@read.get("/deployments", response_model=DeploymentsOut, responses=READ_ERR, summary="List deployments")
def list_deployments(ctx: Ctx) -> DeploymentsOut:
    stored = set(ctx.store.deployments())
    out = []
    # configured ones first, in the deployments file's order (the first is the live one the
    # dashboard opens), then names that only have stored load
    configured = [d.name for d in ctx.fleet.deployments]
    for name in configured + [n for n in ctx.known_names() if n not in configured]:
        d = ctx.configured(name)
        extra: dict[str, Any] = {}
        if d is not None:
            caps = load_capacities(ctx.redis, ctx.settings.key_prefix, d)
            extra = dict(model=d.model, gpus_per_replica=d.gpus_per_replica, min_replicas=d.min_replicas,
                         max_replicas=d.max_replicas, cold_start_min=d.cold_start_min,
                         default_profile=d.default_profile,
                         profiles={k: c.capacity_rpm for k, c in caps.items()},
                         capacity_sources={k: c.source for k, c in caps.items()})
        out.append(DeploymentOut(name=name, configured=d is not None, has_load=name in stored,
                                 paused=ctx.state.paused(name) is not None, **extra))
    return DeploymentsOut(deployments=out)


# The forecast route is what autoscalers and dashboards poll: it takes no injected
# dependencies (FastAPI's dependency solving was most of its cost) and makes the same
# checks as plain calls.
hot = APIRouter(prefix="/v1", tags=["read"])


# Query parameters of the forecast route, documented here and parsed by _forecast_query:
# FastAPI's parameter solving was most of the route's cost, so the route takes none.
_FORECAST_PARAMS = [
    query.path("deployment"), query.doc("horizon", "integer", 1, 30, 30, "minutes ahead"),
    {"name": "quantiles", "in": "query", "required": False,
     "description": "comma-separated levels in (0, 1), e.g. 0.1,0.5,0.9",
     "schema": {"anyOf": [{"type": "string", "maxLength": 80}, {"type": "null"}], "title": "Quantiles"},
     "examples": {"levels": {"value": "0.1,0.5,0.9"}}},
]


def _forecast_query(request: Request) -> tuple[int, tuple[float, ...]]:
    """``horizon`` (1-30, default 30) and ``quantiles`` from the query string; FieldError (422) naming the field."""
    horizon = query.number(request, "horizon", 30, 1, 30, int)
    quantiles = request.query_params.get("quantiles")
    if quantiles is not None and len(quantiles) > 80:
        raise FieldError(("query", "quantiles"), "at most 80 characters")
    return horizon, service.parse_quantiles(quantiles)


@hot.get("/deployments/{deployment}/forecast", response_model=ForecastOut, responses={**READ_ERR, **query.INVALID},
         openapi_extra={"security": [{"HTTPBearer": []}], "parameters": _FORECAST_PARAMS},
         summary="Latest forecast (stored by the workers, or computed now)")
async def get_forecast(request: Request) -> Any:
    ctx: ApiContext = request.app.state.ctx
    check_read(request, ctx)
    horizon, levels = _forecast_query(request)
    dep = await check_known_async(request.path_params["deployment"], ctx)
    # The stored forecast, or a computed one while it is fresh, answered on the event loop
    # from a body rendered once per document.
    body = await service.stored_forecast_bytes(ctx, dep, horizon, levels)
    if body is None:
        hit = ondemand.cached(ctx, dep, horizon, levels)
        # Otherwise one computation from the load store (seconds of CPU, in its own thread),
        # shared by every request that arrives while it runs.
        body = (hit or await ondemand.wait_async(ctx, ondemand.start(ctx, dep, horizon, levels))).body
    return Response(service.aged_bytes(ctx, body), media_type="application/json")


@read.get("/deployments/{deployment}/plan", response_model=PlanOut, responses=READ_ERR,
          summary="Current plan: desired replicas for the next 30 minutes, warmups, switches")
def get_plan(dep: ConfDep, ctx: Ctx) -> dict[str, Any]:
    return service.current_plan(ctx, dep)


@read.get("/deployments/{deployment}/capacity", response_model=CapacityOut, responses=READ_ERR,
          summary="Capacity plan: replicas and GPU-hours per hour for the next day or week")
def get_capacity(
    dep: Dep, ctx: Ctx,
    span: str = Query("day", pattern="^(day|week)$"),
    quantile: float = Query(0.9, ge=0.01, le=0.99),
    utilisation: float = Query(0.8, ge=0.01, le=1, description="target utilisation of an instance"),
    capacity_per_instance: Optional[float] = Query(None, ge=0.001, le=1e7,
                                                   description="requests/min per instance, every hour (default: the "
                                                               "profile the schedule makes active in each hour)"),
    start: Optional[str] = Query(None, max_length=40, description="first hour (default: the hour after the data)"),
    lookback: int = Query(4, ge=1, le=12, description="weeks (or days) of history per hour slot"),
) -> CapacityOut:
    from warmup.planning.capacity import CapacityRequest, capacity_plan
    from warmup.planning.gpu_report import series_inputs

    conf = ctx.configured(dep)
    cap, core, cap_notes = service.capacity_basis(ctx, conf, capacity_per_instance)
    if cap is None:
        raise FieldError(("query", "capacity_per_instance"), "required: the deployment is not configured")
    # requests/min whatever the stored bins, and the forecast: read as the GPU plan reads them (issue 46)
    hist, fc = series_inputs(ctx.store, dep, service.cached_or_stored(ctx, dep), 7 * lookback + 1)
    begin = _ts(start, "start")
    if begin is None:
        begin = (hist.index[-1] + pd.Timedelta(minutes=1)).ceil("h").strftime(TS) if len(hist) else \
            service.utcnow().ceil("h").strftime(TS)
    fi = fp = f50 = None
    try:
        if fc is not None:
            fi, fp, f50 = fc.index, fc.quantile(quantile), fc.quantile(0.5)
    except ValueError:  # Forecast.quantile refuses a level outside its own: those hours come from history
        levels = ", ".join(f"{q:g}" for q in sorted(fc.quantiles))
        cap_notes = [*cap_notes, f"the forecast ({fc.model}) has levels {levels}: quantile {quantile:g} is outside "
                                 "them, so no hour is read from it"]
    req = CapacityRequest(start=pd.Timestamp(begin), span=span, quantile=quantile, utilisation=utilisation,
                          capacity_per_instance=cap, gpus_per_replica=conf.gpus_per_replica if conf else 1,
                          min_replicas=conf.min_replicas if conf else 0,
                          max_replicas=conf.max_replicas if conf else None, lookback_periods=lookback, core=core)
    plan = capacity_plan(hist, req, fi, fp, f50)
    return CapacityOut(
        deployment=dep, span=span, quantile=quantile, utilisation=utilisation, capacity_per_instance=cap,
        gpus_per_replica=req.gpus_per_replica, method=plan.method,
        notes=plan.notes + cap_notes,
        history_minutes=plan.history_minutes, total_gpu_hours=plan.gpu_hours, peak_replicas=plan.peak_replicas,
        hours=[HourOut(start=h.start.strftime(TS), demand_p50_rpm=h.demand_p50_rpm, demand_rpm=h.demand_rpm,
                       replicas=h.replicas, gpu_hours=h.gpu_hours, source=h.source, capacity_rpm=h.capacity_rpm,
                       profile=h.profile or None) for h in plan.hours])


@read.get("/deployments/{deployment}/audit", response_model=AuditOut, responses=READ_ERR,
          summary="Decision audit log, newest first")
def get_audit(dep: Dep, ctx: Ctx,
              kind: Optional[str] = Query(None, pattern=r"^[a-z0-9_.-]{1,40}$"),
              since: Optional[str] = Query(None, max_length=40, description="lower bound on ts (UTC)"),
              until: Optional[str] = Query(None, max_length=40, description="upper bound on ts (UTC)"),
              applied: Optional[bool] = Query(None),
              limit: int = Query(100, ge=1, le=1000)) -> AuditOut:
    lo, hi = _ts(since, "since"), _ts(until, "until")
    rows = ctx.state.audit_log(dep, kind=kind, since=lo, limit=limit if hi is None and applied is None else 5000)
    rows = [r for r in rows if (hi is None or r["ts"] <= hi) and (applied is None or r["applied"] == applied)]
    return AuditOut(deployment=dep, entries=[AuditEntry(**r) for r in rows[:limit]])


def _job_record(ctx: ApiContext, dep: str, job_id: str) -> dict[str, Any]:
    rec = ctx.state.get("job", job_id)
    if rec is None or rec.get("deployment") != dep:  # a job of another deployment is not visible here
        raise NotFoundError(f"no what-if job {job_id} for deployment {dep!r}")
    return rec


@read.get("/deployments/{deployment}/whatif/{job_id}", response_model=JobOut, responses=READ_ERR,
          summary="Poll a what-if backtest job")
def get_whatif(dep: Dep, ctx: Ctx,
               job_id: str = Path(..., pattern=r"^[0-9a-f]{32}$")) -> JobOut:
    from api.jobs import job_status

    rec = _job_record(ctx, dep, job_id)
    status, result, error = job_status(ctx, job_id)
    return JobOut(job_id=job_id, deployment=dep, status=status, submitted_at=rec["submitted_at"],
                  source=rec["source"], policies=rec["policies"], result=result, error=error)


@read.get("/deployments/{deployment}/dashboard", response_model=DashboardOut, responses=READ_ERR,
          summary="Everything the dashboard draws, in one call")
def get_dashboard(dep: Dep, ctx: Ctx, minutes: int = Query(240, ge=10, le=10080)) -> DashboardOut:
    from api.dashboard import dashboard_data

    return dashboard_data(ctx, dep, minutes)


@read.get("/deployments/{deployment}/shadow", responses={**READ_ERR, **_err(409)},
          summary="Shadow mode: the fleet the current autoscaler ran beside warmcast's plan")
def get_shadow(dep: ConfDep, ctx: Ctx,
               since: str = Query("1d", max_length=40, description="a duration back from until (7d, 12h, 90m) "
                                  "or a time (UTC)"),
               until: Optional[str] = Query(None, max_length=40, description="end of the window (UTC; default now)"),
               forecaster: str = Query("seasonal_naive", pattern=r"^[a-z_0-9]{1,40}$",
                                       description="the model warmcast's fleet is re-simulated with")) -> dict[str, Any]:
    from api.shadow import shadow_data

    return shadow_data(ctx, dep.name, since, until, forecaster)


# --------------------------------------------------------------------------- writes

@write.post("/deployments/{deployment}/observations", response_model=ObservationsOut, responses=WRITE_ERR,
            summary="Push per-minute observations into the load store")
def post_observations(body: ObservationsIn, deployment: str, ctx: Ctx) -> ObservationsOut:
    dep = _writable_deployment(ctx, deployment)
    if len(body.observations) > ctx.config.max_observations:
        raise FieldError(("body", "observations"), f"at most {ctx.config.max_observations} rows per request")
    rows = [o.model_dump() for o in body.observations]
    frame = pd.DataFrame(rows)
    frame.index = pd.DatetimeIndex(frame.pop("time"), name="time")
    if frame.index.has_duplicates:
        dup = frame.index[frame.index.duplicated()][0].strftime(TS)
        raise FieldError(("body", "observations", "time"), f"minute {dup} appears more than once")
    frame = frame.dropna(axis=1, how="all").sort_index()
    _ended_minutes_only(frame.index)
    try:
        written = ctx.store.upsert_frame(dep, frame)
    except TimeWindowError as err:  # the store's time window, named as the body field it came from
        raise FieldError(("body", "observations", "time"), str(err)) from None
    ondemand.forget(ctx, dep)
    return ObservationsOut(deployment=dep, written=written, first=frame.index[0].strftime(TS),
                           last=frame.index[-1].strftime(TS))


SKEW_S = 30.0  # a pushing host's clock may run this far ahead of ours


def _ended_minutes_only(times: pd.DatetimeIndex) -> None:
    """Observations are for minutes that have ended: a minute still running, or one ahead of now, would
    move the live forecast's origin into the future (issue 31 finding 2).  Nothing is stored if one is."""
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    last = times.max()
    if last + pd.Timedelta(minutes=1) > now + pd.Timedelta(seconds=SKEW_S):
        raise FieldError(("body", "observations", "time"),
                         f"minute {last.strftime(TS)} has not ended yet (now {now.strftime(TS)} UTC, {SKEW_S:g} s "
                         "clock-skew allowance): observations are accepted for ended minutes only; nothing was stored")


def _writable_deployment(ctx: ApiContext, name: str) -> str:
    """Observations go to configured deployments or ones that already have load; never create others."""
    return check_known(name, ctx)


@write.post("/deployments/{deployment}/profile", response_model=ActionOut, responses=WRITE_ERR,
            summary="Request a manual profile switch (applied by the next tick)")
def post_profile(body: ProfileIn, dep: ConfDep, ctx: Ctx) -> ActionOut:
    if body.profile not in dep.profiles:
        raise FieldError(("body", "profile"), f"{body.profile!r} is not one of {sorted(dep.profiles)}")
    ctx.state.request_profile(dep.name, body.profile, by=BY)
    sid = ctx.state.audit(dep.name, "manual", f"profile -> {body.profile}", f"manual switch requested by {BY}",
                          applied=False, outcome="queued for the next switch tick", inputs={"profile": body.profile})
    return ActionOut(deployment=dep.name, action="profile", detail=f"switch to {body.profile} requested",
                     audit_id=sid)


@write.post("/deployments/{deployment}/pause", response_model=ActionOut, responses=WRITE_ERR,
            summary="Pause automatic actions (decisions are still computed and recorded)")
def post_pause(dep: ConfDep, ctx: Ctx, body: Optional[PauseIn] = None) -> ActionOut:
    reason = body.reason if body else ""
    ctx.state.set_paused(dep.name, True, by=BY, reason=reason)
    sid = ctx.state.audit(dep.name, "manual", "pause", reason or f"paused by {BY}", applied=True, outcome="paused")
    return ActionOut(deployment=dep.name, action="pause", detail="automatic actions paused", audit_id=sid)


@write.post("/deployments/{deployment}/resume", response_model=ActionOut, responses=WRITE_ERR,
            summary="Resume automatic actions")
def post_resume(dep: ConfDep, ctx: Ctx) -> ActionOut:
    ctx.state.set_paused(dep.name, False, by=BY)
    sid = ctx.state.audit(dep.name, "manual", "resume", f"resumed by {BY}", applied=True, outcome="resumed")
    return ActionOut(deployment=dep.name, action="resume", detail="automatic actions resumed", audit_id=sid)


@write.post("/deployments/{deployment}/whatif", response_model=JobOut, status_code=202, responses=WRITE_ERR,
            summary="Start a what-if backtest of policies on the stored load (Celery job)")
def post_whatif(body: WhatIfIn, dep: ConfDep, ctx: Ctx) -> JobOut:
    from api.jobs import submit_whatif

    if dep.name not in ctx.store.deployments():
        raise FieldError(("path", "deployment"), "no stored load to replay; upload a log to /whatif/upload")
    return submit_whatif(ctx, dep, body, log_path=None, source="stored load")


_UPLOAD_SUFFIX = {".csv", ".jsonl", ".json", ".parquet"}


@write.post("/deployments/{deployment}/whatif/upload", response_model=JobOut, status_code=202,
            responses=WRITE_ERR, summary="Start a what-if backtest on an uploaded log (Celery job)")
def post_whatif_upload(
    dep: ConfDep, ctx: Ctx,
    file: UploadFile = File(..., description="request log or count series: .csv, .jsonl, .json, .parquet"),
    test_start: str = Form(..., max_length=40),
    policies: str = Form("reactive,predictive,oracle", max_length=100),
    capacity_rpm: Optional[float] = Form(None, ge=0.001, le=1e7),
    cold_start_min: Optional[float] = Form(None, ge=0, le=240),
) -> JobOut:
    from api.jobs import submit_whatif

    # The client's file name only picks a known suffix; the stored name is generated.
    suffix = "." + (file.filename or "").rsplit(".", 1)[-1].lower() if "." in (file.filename or "") else ""
    if suffix not in _UPLOAD_SUFFIX:
        raise FieldError(("body", "file"), f"file name must end in one of {sorted(_UPLOAD_SUFFIX)}")
    names = [p.strip() for p in policies.split(",") if p.strip()]
    try:
        body = WhatIfIn.model_validate({"policies": names, "test_start": _ts(test_start, "test_start", "body"),
                                        "capacity_rpm": capacity_rpm, "cold_start_min": cold_start_min})
    except ValidationError as err:
        e = err.errors()[0]
        raise FieldError(("body", *(str(p) for p in e["loc"])), e["msg"]) from None
    target = _upload_dir(ctx) / f"{uuid.uuid4().hex}{suffix}"
    part = target.with_name(target.name + ".part")  # renamed into place whole: a stopped copy leaves no log
    with open(part, "wb") as out:
        shutil.copyfileobj(file.file, out, length=1 << 20)
    os.replace(part, target)
    return submit_whatif(ctx, dep, body, log_path=str(target), source=f"upload {target.name}")


UPLOAD_KEEP_S = 7 * 86400  # as long as the job records


def _upload_dir(ctx: ApiContext):
    """state_dir/uploads, with logs older than the job records removed (they are no longer reachable)."""
    import time as _time

    d = ctx.data_dir / "uploads"
    d.mkdir(parents=True, exist_ok=True)
    cutoff = _time.time() - UPLOAD_KEEP_S
    for old in d.iterdir():
        try:
            if old.is_file() and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass  # another process removed it first
    return d
