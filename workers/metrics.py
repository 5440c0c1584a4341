"""Prometheus metrics of the loop itself, and the JSON log format.

The worker runs a thread pool in one process (``--pool threads``), so the default
registry holds everything and :func:`serve` exposes it on
``WARMCAST_WORKERS_METRICS_PORT`` (0: not exposed).
"""
from __future__ import annotations

import json
import logging
import time

from prometheus_client import Counter, Gauge, Histogram, start_http_server

TASK_SECONDS = Histogram("warmcast_task_seconds", "Duration of loop tasks", ["task"],
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
# CPU of the thread that ran each loop task, by schedule kind (a shard task counts under its kind):
# what a deployment costs a minute, step by step (bench/scale.py reads it)
STEP_CPU = Counter("warmcast_step_cpu_seconds_total", "CPU seconds of loop tasks by kind (the running thread's)",
                   ["kind"])
TASK_FAILURES = Counter("warmcast_task_failures_total", "Loop tasks that raised", ["task", "error"])
TASK_RETRIES = Counter("warmcast_task_retries_total", "Loop tasks retried after a transient error", ["task"])
DECISIONS = Counter("warmcast_decisions_total", "Decisions by kind and reason code",
                    ["deployment", "kind", "reason", "applied"])
SKIPPED_SLOTS = Counter("warmcast_skipped_slots_total", "Schedule slots no fan-out served (the beat did not fire "
                        "in them); each skipped tick is audited per deployment", ["kind"])
DROPPED = Counter("warmcast_dropped_tasks_total", "Loop tasks that never ran: expired in the queue, revoked, "
                  "rejected or unknown to the worker, or reached by their shard after the slot's expiry (late); "
                  "each lost tick is audited per deployment (workers/dropped.py)", ["kind", "why", "shard"])
TICK_DELAY = Histogram("warmcast_tick_delay_seconds", "From a slot's start to its tick applied and audited, per "
                       "shard ('-': unsharded); a tick later than its expiry is dropped instead (warmcast_dropped_"
                       "tasks_total)", ["shard"], buckets=(0.5, 1, 2, 5, 10, 20, 30, 45, 60, 120))
DEPLOYMENTS_FILE_OK = Gauge("warmcast_deployments_file_ok", "1 while the loop runs the deployments file as it "
                            "is; 0 while a change to it was refused (state document deployments-file says why)")
DEPLOYMENTS_FILE_RELOADS = Counter("warmcast_deployments_file_reloads_total", "Changes of the deployments file "
                                   "seen by this process, applied or refused", ["result"])
DUPLICATES = Counter("warmcast_duplicate_runs_total", "Runs skipped because their tick was already done", ["task"])
FORECASTS = Counter("warmcast_forecasts_total", "Forecasts made", ["deployment", "model"])
# the forecast step's costliest part (judging the models by backtest, then fitting): once a process,
# deployment and hour; no deployment label, so that ten thousand deployments stay one series
MODEL_RESOLUTIONS = Counter("warmcast_model_resolutions_total", "Models the forecast step resolved (judged and fitted)")
FORECAST_MAE = Gauge("warmcast_forecast_mae", "MAE (req/min) of the previous forecast over the leads observed",
                     ["deployment"])
FORECAST_ERR = Histogram("warmcast_forecast_abs_error", "Absolute error (req/min) of forecasts once actuals arrive",
                         ["deployment", "lead"], buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000))
CALIBRATION_FACTOR = Gauge("warmcast_calibration_correction", "Observed / calibrated TTFT P99 at the observed "
                           "load per instance (smoothed; 1 = as calibrated)", ["deployment"])
CALIBRATION_DRIFT = Gauge("warmcast_calibration_drift", "1 while the correction is more than 15% off 1: recalibrate",
                          ["deployment"])
SIGNAL = Gauge("warmcast_signal", "Latest live signal of a deployment", ["deployment", "signal"])
POOL_WARM_GPUS = Gauge("warmcast_pool_warm_gpus", "Warm GPUs a node pool holds (balloons), from the fleet "
                       "tick (workers/steps/fleet.py; the reason in GET /v1/fleet)", ["pool"])
POOL_NODES = Gauge("warmcast_pool_nodes_wanted", "Nodes a node pool wants for its instances and warm GPUs", ["pool"])
WARMUP_REQUESTS = Counter("warmcast_warmup_requests_total", "Warmup requests sent", ["deployment"])

_served = False


def serve(port: int) -> None:
    global _served
    if port and not _served:
        start_http_server(port, addr="127.0.0.1")
        _served = True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's ``event`` dict."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "msg": record.getMessage(),
               "process": record.process}
        ev = getattr(record, "event", None)
        if isinstance(ev, dict):
            out.update(ev)
        if record.exc_info and redis_unavailable(record.exc_info[1]):
            # Redis down or failing over: the task is retried or the next slot runs it; one line names
            # the cause instead of a traceback per task (a Sentinel failover logged eight)
            out["redis_unavailable"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def redis_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from) is Redis or the broker being unreachable."""
    import redis
    from kombu.exceptions import OperationalError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OperationalError)):
            return True
        if type(exc).__name__ == "Reject" and exc.args and isinstance(exc.args[0], BaseException):
            exc = exc.args[0]  # Celery's Reject carries the error it gave up on
        else:
            exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
