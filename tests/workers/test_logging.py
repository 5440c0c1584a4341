"""Issue 31: while Redis fails over, every task that gives up logged a whole traceback (eight in one
Sentinel failover of the chaos bench); the worker's JSON log names the cause in one field instead,
and keeps the traceback of any other error."""
from __future__ import annotations

import json
import logging
import sys

import redis
from celery.exceptions import Reject
from kombu.exceptions import OperationalError

from workers.metrics import JsonFormatter


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:  # noqa: BLE001 - the record carries whatever was raised
        return logging.LogRecord("celery.app.trace", logging.WARNING, __file__, 1, "task gave up", None, sys.exc_info())


def test_a_task_rejected_because_redis_is_unreachable_logs_one_line_with_the_cause():
    try:
        raise OperationalError("No master found for 'wcmaster'")
    except OperationalError as err:
        out = json.loads(JsonFormatter().format(_record(Reject(err, requeue=False))))
    assert "exc" not in out and "No master found" in out["redis_unavailable"]
    out = json.loads(JsonFormatter().format(_record(redis.ConnectionError("Connection refused"))))
    assert "exc" not in out and "Connection refused" in out["redis_unavailable"]


def test_any_other_error_keeps_its_traceback():
    out = json.loads(JsonFormatter().format(_record(ZeroDivisionError("boom"))))
    assert "Traceback" in out["exc"] and "redis_unavailable" not in out
