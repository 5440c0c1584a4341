"""Celery tasks: each binds one step of :mod:`workers.steps` (or the fan-out, :mod:`workers.fanout`)
to Celery, nothing more.

Every task is acknowledged late (after it ran) and retried only for the named
transient errors in :data:`TRANSIENT`; anything else fails once, is counted in
``warmcast_task_failures_total`` and logged.  Tasks are registered with
``shared_task`` so every app built by :func:`workers.app.make_celery` has them.
``warmcast.shard`` runs one kind's step for every deployment of a shard (:mod:`workers.shardrun`);
tasks Celery drops unrun are counted and their lost ticks audited (:mod:`workers.dropped`).
"""
from __future__ import annotations

import logging
import time
from datetime import datetime

import redis
from celery import shared_task, signals
from kombu.exceptions import OperationalError

from workers import dropped, metrics, shardrun
from workers.context import get_ctx
from workers.dropped import SHARD as SHARD_TASK
from workers.fanout import fan_out
from workers.locks import LockBusy
from workers.schedule import PERIODIC
from workers.steps import alerts as alerts_step
from workers.steps import fleet as fleet_step
from workers.steps import retrain as retrain_step
from workers.steps import warmup_run as warmup_run_step

log = logging.getLogger("warmcast.workers.tasks")


def _transient() -> tuple[type[BaseException], ...]:
    import httpx

    from warmup.actuators.vllm_client import InstanceUnavailable

    return (redis.ConnectionError, redis.TimeoutError, OperationalError, LockBusy, httpx.TransportError,
            InstanceUnavailable)


TRANSIENT = _transient()
COMMON = dict(acks_late=True, autoretry_for=TRANSIENT, retry_backoff=1, retry_backoff_max=30, retry_jitter=True,
              max_retries=3)


def _ctx(task):
    return get_ctx(task.app)


# --------------------------------------------------------------------------- fan-out


@shared_task(bind=True, name="warmcast.fanout", **COMMON)
def fanout(self, kind: str, tick: str = "") -> int:
    """Send one ``kind`` task per deployment, tagged with the schedule slot (``tick``: the one beat fired for)."""
    return fan_out(_ctx(self), kind, self.request.id or "", self.app.send_task, tick)


# --------------------------------------------------------------------------- per-deployment steps
# Each runs its kind's runner (workers/shardrun.py), the same function a shard task runs per deployment.


@shared_task(bind=True, name="warmcast.scrape", **COMMON)
def scrape(self, deployment: str, tick: str = "", now: str = "") -> dict:
    """``now``: the clock (ISO 8601) when a replay drives the loop, as for ``warmcast.plan``."""
    clock = datetime.fromisoformat(now) if now else None
    return shardrun.run_scrape(_ctx(self), deployment, tick, now=clock)


@shared_task(bind=True, name="warmcast.ingest", **COMMON)
def ingest(self, deployment: str, tick: str = "") -> dict:
    return shardrun.run_ingest(_ctx(self), deployment, tick)


@shared_task(bind=True, name="warmcast.forecast", **COMMON)
def forecast(self, deployment: str, tick: str = "", now: str = "") -> dict:
    """``now``: the clock (ISO 8601) when a replay drives the loop, as for ``warmcast.plan``."""
    clock = datetime.fromisoformat(now) if now else None
    return shardrun.run_forecast(_ctx(self), deployment, tick, now=clock)


# The one tick (workers/steps/tick.py): decide once, apply scale, sleep tier, switch and warmups.
@shared_task(bind=True, name="warmcast.plan", **COMMON)
def plan(self, deployment: str, tick: str = "", now: str = "") -> dict:
    """``now``: the tick's clock (ISO 8601) when a replay drives the loop (workers/shadow_replay.py);
    beat leaves it empty and the tick reads the wall clock.  The slot comes from that clock."""
    clock = datetime.fromisoformat(now) if now else None
    return shardrun.run_plan(_ctx(self), deployment, tick, self.request.id or "", now=clock)


# Node pools' warm GPUs (issue 45), sent by the plan fan-out half a plan interval after its slot.
@shared_task(bind=True, name="warmcast.fleet", **COMMON)
def fleet(self, tick: str = "") -> dict:
    return fleet_step.step(_ctx(self)).as_dict()


# One kind's step for every deployment of a shard (WARMCAST_WORKERS_SHARDS > 0; workers/shards.py).
# A transient error retries only the deployments it hit (``only``); the others are not run twice.
@shared_task(bind=True, name=SHARD_TASK, acks_late=True, max_retries=3)
def shard(self, kind: str, shard: int, shards: int, tick: str = "", only: list[str] | None = None) -> dict:
    res = shardrun.run_shard(_ctx(self), kind, int(shard), int(shards), tick, self.request.id or "", only,
                             transient=TRANSIENT)
    if res.transient and self.request.retries < self.max_retries:
        raise self.retry(kwargs={"kind": kind, "shard": shard, "shards": shards, "tick": tick,
                                 "only": res.transient}, countdown=min(30, 2 ** self.request.retries))
    if res.transient:   # retries spent: as a per-deployment task that raised after its last retry
        metrics.TASK_FAILURES.labels(PERIODIC[kind][1], "RetriesExhausted").inc(len(res.transient))
        log.error("shard %s: %s still failing after %d retries for %s", shard, kind, self.max_retries, res.transient)
    return res.as_dict()


# Long tasks are acknowledged when they start, not after: Redis redelivers an unacknowledged message after
# the visibility timeout, and a retrain that outlived it ran again beside itself under the same task id
# (which its lease lets in, as for a dead first attempt): 12 copies of one nightly retrain starved the
# minute loop for half an hour in bench/chaos.py's round three (issue 41).  A retrain or what-if lost with
# its worker is not redelivered: the next night's retrain (or the caller's new job) runs instead.
@shared_task(bind=True, name="warmcast.retrain", acks_late=False, autoretry_for=(LockBusy,), max_retries=0)
def retrain(self, deployment: str, tick: str = "") -> dict:
    """The nightly retrain, then the risk re-tuned for the deployment's SLO (both audited)."""
    from workers.steps import retune as retune_step

    ctx = _ctx(self)
    out = retrain_step.step(ctx, deployment, run_id=self.request.id).as_dict()
    out["retune"] = retune_step.step(ctx, deployment).as_dict()
    return out


@shared_task(bind=True, name="warmcast.retrain_fleet", acks_late=False, autoretry_for=(LockBusy,), max_retries=0)
def retrain_fleet(self, tick: str = "") -> dict:
    """The nightly fleet model: one fit over every deployment and its clients (issue 43)."""
    return retrain_step.fleet_step(_ctx(self), run_id=self.request.id).as_dict()


@shared_task(bind=True, name="warmcast.expire", **COMMON)
def expire(self, deployment: str, tick: str = "") -> dict:
    return shardrun.run_expire(_ctx(self), deployment, tick)


# Not acknowledged late and never retried: re-running a warmup after a crash would double its load.
@shared_task(bind=True, name="warmcast.run_warmup", acks_late=False, max_retries=0)
def run_warmup(self, deployment: str, urls: list[str], requests: int, concurrency: int, duration_s: float) -> list:
    return warmup_run_step.step(_ctx(self), deployment, urls=urls, requests=requests, concurrency=concurrency,
                                duration_s=duration_s).results


@shared_task(bind=True, name="warmcast.whatif_backtest", acks_late=False, max_retries=0, ignore_result=False)
def whatif_backtest(self, deployment: str, policies: list[str], test_start: str, capacity_rpm: float,
                    cold_start_min: float | None = None, log_path: str | None = None) -> dict:
    from workers.whatif import run_whatif

    # cold_start_min None: the planner's lead (measured launches first), named in the report
    return run_whatif(_ctx(self), deployment, list(policies), test_start, float(capacity_rpm),
                      None if cold_start_min is None else float(cold_start_min), log_path)


# --------------------------------------------------------------------------- observability hooks

_started: dict[str, tuple[float, float]] = {}
KIND_OF = {task: kind for kind, (_, task) in PERIODIC.items()}


@signals.task_prerun.connect
def _prerun(task_id=None, **_):
    _started[task_id] = (time.perf_counter(), time.thread_time())   # the pool's thread runs the task


@signals.task_postrun.connect
def _postrun(task_id=None, task=None, kwargs=None, **_):
    t0 = _started.pop(task_id, None)
    if t0 is not None and task is not None:
        metrics.TASK_SECONDS.labels(task.name).observe(time.perf_counter() - t0[0])
        if task.name != SHARD_TASK:   # a shard counts as it goes (shardrun.run_shard): its tasks run long
            kind = KIND_OF.get(task.name, task.name)
            metrics.STEP_CPU.labels(str(kind)).inc(max(0.0, time.thread_time() - t0[1]))


@signals.task_failure.connect
def _failure(sender=None, exception=None, **_):
    metrics.TASK_FAILURES.labels(getattr(sender, "name", "?"), type(exception).__name__).inc()
    log.error("task failed", extra={"event": {"task": getattr(sender, "name", "?"), "error": repr(exception)}})


@signals.task_retry.connect
def _retry(sender=None, reason=None, **_):
    metrics.TASK_RETRIES.labels(getattr(sender, "name", "?")).inc()
    log.warning("task retry", extra={"event": {"task": getattr(sender, "name", "?"), "reason": str(reason)}})


# Tasks Celery drops unrun (issue 44): counted per kind, why and shard, and a lost tick audited per
# deployment (workers/dropped.py).  Expiry is checked when a worker receives the message and again
# before it runs, and both end here with ``expired=True``.
@signals.task_revoked.connect
def _revoked(sender=None, request=None, expired=False, terminated=False, **_):
    why = "expired" if expired else "terminated" if terminated else "revoked"
    _dropped(getattr(sender, "app", None), getattr(sender, "name", "?"), dropped.kwargs_of(request), why,
             str(getattr(request, "expires", None) or ""), str(getattr(request, "id", None) or ""))


@signals.task_rejected.connect
def _rejected(sender=None, message=None, **_):
    name, kwargs = _message_task(message)
    _dropped(getattr(sender, "app", None), name, kwargs, "rejected", task_id=_message_id(message))


@signals.task_unknown.connect
def _unknown(sender=None, message=None, name=None, id=None, **_):  # noqa: A002 - Celery's signature
    _dropped(getattr(sender, "app", None), name or _message_task(message)[0], _message_task(message)[1], "unknown",
             task_id=str(id or ""))


def _message_id(message) -> str:
    try:
        return str((message.headers or {}).get("id") or "")
    except Exception:  # noqa: BLE001 - no id: counted without the redelivery check
        return ""


def _message_task(message) -> tuple[str, dict]:
    """(task name, keyword arguments) of a raw message the worker refused; what of it can be read."""
    try:
        body = message.payload
        kwargs = body[1] if isinstance(body, (list, tuple)) and len(body) > 1 and isinstance(body[1], dict) else {}
        return str((message.headers or {}).get("task", "?")), kwargs
    except Exception:  # noqa: BLE001 - an undecodable message is still counted, under '?'
        return "?", {}


def _dropped(app, name: str, kwargs: dict, why: str, expires: str = "", task_id: str = "") -> None:
    try:
        dropped.note(get_ctx(app), name, dict(kwargs), why, expires, task_id)
    except Exception:  # noqa: BLE001 - counting a drop must never take the worker down with it
        log.exception("could not record a dropped task", extra={"event": {"task": name, "why": why}})


@signals.setup_logging.connect
def _setup_logging(**_):
    from workers.app import celery_app

    try:
        level = celery_app.wc_settings.log_level
    except Exception:  # noqa: BLE001 - bad settings are reported by the app itself
        level = "INFO"
    metrics.configure_logging(level)


@shared_task(name="warmcast.ping")
def ping() -> str:
    """A round trip through the queue: a worker that answers takes tasks (remote control is off)."""
    return "pong"


@signals.worker_ready.connect
def _worker_ready(sender=None, **_):
    app = getattr(sender, "app", None)
    port = app.wc_options.metrics_port if app is not None and hasattr(app, "wc_options") else 0
    metrics.serve(port)


# The alert step (workers/steps/alerts.py): ``warmcast.alert``, sent by the API's Alertmanager
# receiver, and ``warmcast.alert_check``, the periodic escalation check the beat fans out per
# deployment (schedule kind ``alerts``). A retry decides again from the stored episode, so it
# never repeats a response.
ALERT_TASK = "warmcast.alert"
ALERT_CHECK_TASK = "warmcast.alert_check"


@shared_task(bind=True, name=ALERT_TASK, **COMMON)
def alert(self, deployment: str, note: dict) -> dict:
    return alerts_step.step(get_ctx(self.app), deployment, note).as_dict()


@shared_task(bind=True, name=ALERT_CHECK_TASK, **COMMON)
def alert_check(self, deployment: str, tick: str = "") -> dict:
    return shardrun.run_alert_check(get_ctx(self.app), deployment, tick)
