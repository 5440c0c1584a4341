"""The Celery task of the alert step (workers/alerts.py): sent by the API's Alertmanager receiver.

Retried for the transient errors every task retries for; a retry decides again from the stored
episode, so it never repeats a response."""
from __future__ import annotations

from celery import shared_task

from workers import alerts
from workers.context import get_ctx
from workers.tasks import COMMON

TASK = "warmcast.alert"


@shared_task(bind=True, name=TASK, **COMMON)
def alert(self, deployment: str, note: dict) -> dict:
    return alerts.step(get_ctx(self.app), deployment, note).as_dict()
