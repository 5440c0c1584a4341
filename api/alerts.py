"""The Alertmanager webhook receiver (``POST /v1/alerts``) and the alert history of a deployment.

Alertmanager's ``webhook_configs`` posts its notification here with the API's write token
(``http_config: {authorization: {credentials: <api_token>}}``).  Each deployment's alerts in the
notification are recorded in Redis (``P:alert-notes:D``), then handed to the workers' alert step
(``warmcast.alert``), which decides each tier's response once per group and applies it.  A
notification naming an unknown deployment or tier is refused whole (422/404, nothing recorded):
Alertmanager does not retry a 4xx, so the error is in its log.  Workers unreachable: 503 after
recording, and Alertmanager retries.  The note carries the groupKey (the episode's key) and each
alert's fingerprint and status (what tells a re-delivery from an alert joining the group).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.deps import ApiContext, get_ctx, known_deployment, require_read, require_write
from api.errors import FieldError
from api.routes import READ_ERR, WRITE_ERR
from warmcast.errors import NotFoundError
from warmup.core.alerts import Tier

receiver = APIRouter(prefix="/v1", dependencies=[Depends(require_write)], tags=["alerts"])
history = APIRouter(prefix="/v1", dependencies=[Depends(require_read)], tags=["alerts"])
TASK = "warmcast.alert"


class AlertIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    fingerprint: str = Field("", max_length=64)

    @field_validator("startsAt")
    @classmethod
    def _starts_after_1971(cls, v: datetime) -> datetime:
        """An alert that started before 1971 is no alert of a running fleet (one crashed the report: issue
        31); Alertmanager's zero time belongs in ``endsAt`` of a firing alert, never in ``startsAt``."""
        if (v if v.tzinfo else v.replace(tzinfo=timezone.utc)) < datetime(1971, 1, 1, tzinfo=timezone.utc):
            raise ValueError(f"startsAt {v.isoformat()} is before 1971")
        return v


class AlertmanagerIn(BaseModel):
    """Alertmanager's webhook payload (version 4)."""

    model_config = ConfigDict(extra="ignore")

    version: str = "4"
    groupKey: str = Field(..., min_length=1, max_length=2000)
    status: Literal["firing", "resolved"]
    receiver: str = ""
    alerts: list[AlertIn] = Field(..., min_length=1, max_length=1000)


class AcceptedOut(BaseModel):
    deployment: str
    group_key: str
    status: str
    tier: str
    alertnames: list[str]
    note_id: str
    task_id: str


class ReceivedOut(BaseModel):
    accepted: list[AcceptedOut]


class AlertsOut(BaseModel):
    deployment: str
    episodes: list[dict[str, Any]]
    reports: list[dict[str, Any]]
    failover: dict[str, Any] | None


def _utc(t: datetime | None) -> str | None:
    """Naive UTC ISO text; Alertmanager's "0001-01-01T00:00:00Z" (not ended) is None."""
    if t is None or t.year < 1971:
        return None
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return t.isoformat()


def notes_of(body: AlertmanagerIn, ctx: ApiContext) -> list[dict[str, Any]]:
    """One note per deployment named in the notification (the core's AlertNote, as JSON)."""
    by_dep: dict[str, list[AlertIn]] = {}
    for i, a in enumerate(body.alerts):
        dep = a.labels.get("deployment")
        if not dep:
            raise FieldError(("body", "alerts", str(i), "labels"), "needs a deployment label (warmcast alerts "
                                                                    "rules sets one on every rule)")
        if not a.labels.get("tier"):  # a forged or hand-made alert must not run the primary tier by default
            raise FieldError(("body", "alerts", str(i), "labels"), "needs a tier label (primary, medium or severe; "
                                                                    "warmcast alerts rules sets one on every rule)")
        try:
            Tier.parse(a.labels.get("tier"))
        except ValueError as err:
            raise FieldError(("body", "alerts", str(i), "labels", "tier"), str(err)) from None
        if ctx.configured(dep) is None:
            raise NotFoundError(f"alerts[{i}]: deployment {dep!r} is not configured; configured: "
                                f"{[d.name for d in ctx.fleet.deployments]}")
        by_dep.setdefault(dep, []).append(a)
    return [_note(body, dep, alerts) for dep, alerts in by_dep.items()]


def _note(body: AlertmanagerIn, dep: str, alerts: list[AlertIn]) -> dict[str, Any]:
    firing = [a for a in alerts if a.status == "firing"]
    counted = firing or alerts
    tier = max(Tier.parse(a.labels.get("tier")) for a in counted)
    adjust = next((a.labels["adjust"] for a in counted if a.labels.get("adjust") in ("up", "down")), "")
    ends = [e for e in (_utc(a.endsAt) for a in alerts) if e]
    return {"group_key": body.groupKey, "deployment": dep, "status": "firing" if firing else "resolved",
            "tier": tier.name.lower(), "alertnames": sorted({a.labels.get("alertname", "?") for a in counted}),
            "starts_at": min(_utc(a.startsAt) for a in counted), "ends_at": None if firing else max(ends, default=None),
            "adjust": adjust, "receiver": body.receiver, "received_at": _utc(datetime.now(timezone.utc)),
            # every alert's identity and status: a re-delivery repeats them exactly (warmup.core.alerts)
            "alerts": sorted([a.fingerprint, a.status] for a in alerts)}


@receiver.post("/alerts", response_model=ReceivedOut, status_code=202, responses=WRITE_ERR,
               summary="Alertmanager webhook: record the notification and hand it to the alert step")
def post_alerts(body: AlertmanagerIn, ctx: ApiContext = Depends(get_ctx)) -> ReceivedOut:
    from api.jobs import WorkersUnavailable, celery_app
    from workers.alerting.state import record_note

    notes = notes_of(body, ctx)
    out = []
    for note in notes:
        note_id = record_note(ctx.redis, ctx.settings.key_prefix, note["deployment"], note)
        try:
            res = celery_app(ctx).send_task(TASK, kwargs={"deployment": note["deployment"], "note": note},
                                            retry=False)
        except WorkersUnavailable:
            raise
        except Exception as err:  # noqa: BLE001 - broker errors come in many kombu/redis types
            raise WorkersUnavailable(f"notification recorded ({note_id}) but not queued: "
                                     f"{type(err).__name__}: {err}") from None
        out.append(AcceptedOut(deployment=note["deployment"], group_key=note["group_key"], status=note["status"],
                               tier=note["tier"], alertnames=note["alertnames"], note_id=note_id, task_id=res.id))
    return ReceivedOut(accepted=out)


@history.get("/deployments/{deployment}/alerts", response_model=AlertsOut, responses=READ_ERR,
             summary="Alert episodes (tier reached, responses decided), diagnostic reports, failover state")
def get_alerts(deployment: str = Depends(known_deployment), ctx: ApiContext = Depends(get_ctx),
               reports: int = Query(5, ge=0, le=50)) -> AlertsOut:
    from workers.alerting import state as alert_state
    p = ctx.settings.key_prefix
    failover = ctx.redis.get(alert_state.key(p, "failover", deployment))
    return AlertsOut(deployment=deployment, episodes=alert_state.episodes(ctx.redis, p, deployment),
                     reports=alert_state.reports(ctx.redis, p, deployment, reports) if reports else [],
                     failover=json.loads(failover) if failover else None)
