"""What-if backtests as Celery jobs (the workers own the task; the API only submits and polls).

Task contract (issue 6): ``warmcast.whatif_backtest`` with kwargs ``deployment,
policies, test_start, capacity_rpm, cold_start_min, log_path=None`` returns a
per-policy report dict (``cold_start_min`` None: the planner's lead, named in the
report).  The job id is the Celery task id; a small record in Redis (``P:job:ID``)
ties it to its deployment so one deployment cannot read another's.
"""
from __future__ import annotations

import math
from datetime import timezone
from typing import Any

from api.deps import ApiContext
from api.schemas import JobOut, WhatIfIn
from warmcast.config.deployments import Deployment
from warmcast.errors import WarmcastError
from warmcast.state import _clean

TASK = "warmcast.whatif_backtest"
JOB_TTL_S = 7 * 86400


class WorkersUnavailable(WarmcastError):
    """The Celery app or its broker cannot be reached (the API answers 503)."""


def celery_app(ctx: ApiContext):
    """A Celery client configured from the API's own settings (same Redis and key prefix)."""
    app = ctx.cache.get("celery")
    if app is None:
        from workers.app import make_celery

        app = ctx.cache["celery"] = make_celery(ctx.settings)
    return app


def _default_capacity(ctx: ApiContext, dep: Deployment) -> float:
    """The default profile's calibrated capacity where one is stored, else the declared one."""
    from warmup.calibration.store import load_capacities

    return load_capacities(ctx.redis, ctx.settings.key_prefix, dep)[dep.default_profile].capacity_rpm


def submit_whatif(ctx: ApiContext, dep: Deployment, body: WhatIfIn, log_path: str | None, source: str) -> JobOut:
    import uuid

    from api.service import TS, utcnow

    job_id = uuid.uuid4().hex
    start = body.test_start
    if start.tzinfo is not None:  # every time in warmcast is naive UTC
        start = start.astimezone(timezone.utc).replace(tzinfo=None)
    kwargs = {
        "deployment": dep.name, "policies": list(body.policies),
        "test_start": start.strftime(TS),
        "capacity_rpm": float(body.capacity_rpm or _default_capacity(ctx, dep)),
        # None: the worker replays with the planner's lead (measured launch-to-ready first, see
        # workers.lead) and its report names the value and its source
        "cold_start_min": None if body.cold_start_min is None else float(body.cold_start_min),
        "log_path": log_path,
    }
    rec = {"deployment": dep.name, "submitted_at": utcnow().strftime(TS), "source": source,
           "policies": kwargs["policies"], "kwargs": kwargs}
    ctx.state.put("job", job_id, rec, ttl_s=JOB_TTL_S)
    try:
        celery_app(ctx).send_task(TASK, kwargs=kwargs, task_id=job_id, retry=False)
    except WorkersUnavailable:
        ctx.state.r.delete(ctx.state.key("job", job_id))
        raise
    except Exception as err:  # noqa: BLE001 - broker errors come in many kombu/redis types
        ctx.state.r.delete(ctx.state.key("job", job_id))
        raise WorkersUnavailable(f"could not queue the job: {type(err).__name__}: {err}") from None
    ctx.state.audit(dep.name, "whatif", "submitted", f"what-if backtest of {kwargs['policies']} on {source}",
                    applied=False, outcome=job_id, inputs={k: v for k, v in kwargs.items() if k != "log_path"})
    return JobOut(job_id=job_id, deployment=dep.name, status="PENDING", submitted_at=rec["submitted_at"],
                  source=source, policies=kwargs["policies"])


def job_status(ctx: ApiContext, job_id: str) -> tuple[str, dict[str, Any] | None, str | None]:
    from celery.result import AsyncResult

    res = AsyncResult(job_id, app=celery_app(ctx))
    try:
        state = res.state
        if state == "SUCCESS":
            value = res.result
            return state, _json_safe(value if isinstance(value, dict) else {"value": value}), None
        if state == "FAILURE":
            return state, None, f"{type(res.result).__name__}: {res.result}"
        return state, None, None
    except Exception as err:  # noqa: BLE001
        raise WorkersUnavailable(f"cannot read job {job_id}: {type(err).__name__}: {err}") from None


def _json_safe(obj: Any) -> Any:
    out = _clean(obj)

    def fix(v):
        if isinstance(v, dict):
            return {str(k): fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, float) and not math.isfinite(v):
            return None
        return v

    return fix(out)
