"""The Celery tasks of the alert step (workers/alerts.py): ``warmcast.alert``, sent by the API's
Alertmanager receiver, and ``warmcast.alert_check``, the periodic escalation check the beat fans
out per deployment (schedule kind ``alerts``).

Retried for the transient errors every task retries for; a retry decides again from the stored
episode, so it never repeats a response."""
from __future__ import annotations

from celery import shared_task

from workers import alerts
from workers.context import get_ctx
from workers.tasks import COMMON

TASK = "warmcast.alert"
CHECK_TASK = "warmcast.alert_check"


@shared_task(bind=True, name=TASK, **COMMON)
def alert(self, deployment: str, note: dict) -> dict:
    return alerts.step(get_ctx(self.app), deployment, note).as_dict()


@shared_task(bind=True, name=CHECK_TASK, **COMMON)
def alert_check(self, deployment: str, tick: str = "") -> dict:
    return {"deployment": deployment, "escalated": [o.as_dict() for o in alerts.check(get_ctx(self.app), deployment)]}
