"""The Celery application: Redis as broker and result backend, RedBeat as the beat scheduler.

``celery_app`` is configured lazily from :func:`warmcast.config.settings.load_settings`
(``WARMCAST_*``) the first time something reads its configuration, so importing
this module (the API does, to ``send_task``) neither reads files nor starts the
embedded Redis.  ``make_celery(settings)`` builds an app for given settings.

Every key Celery, Kombu and RedBeat write is under ``<key_prefix>:celery:`` /
``<key_prefix>:redbeat:``, so several warmcast installs (and tests) share one
Redis without seeing each other's queues or schedules.
"""
from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from workers.options import WorkerOptions, load_options

log = logging.getLogger("warmcast.workers")

TASK_MODULES = ["workers.tasks"]


def celery_config(settings, options: WorkerOptions) -> dict[str, Any]:
    """The Celery/RedBeat configuration for these settings (starts the embedded Redis if no URL)."""
    from warmcast.redisconn import celery_endpoints
    from warmcast.runtime import redis_url
    from workers.schedule import beat_schedule

    url = redis_url(settings)
    prefix = settings.key_prefix
    # Unacknowledged messages of a dead worker come back after visibility_timeout; scan for them
    # often enough that this is the only delay (Kombu's default scans every ~100 s).
    transport = {"global_keyprefix": f"{prefix}:celery:", "visibility_timeout": options.visibility_timeout_s,
                 "unacked_restore_interval": max(1, min(10, int(options.visibility_timeout_s // 3))),
                 "unacked_restore_throttle": 1,
                 "socket_timeout": 10, "socket_connect_timeout": 5, "health_check_interval": 10,
                 "retry_on_timeout": True}
    # a sentinel:// URL: kombu's and Celery's sentinel transports, RedBeat's redis-sentinel
    ends = celery_endpoints(url, settings.redis_master_name, {
        "retry_period": 60, "socket_timeout": 10, "socket_connect_timeout": 5})
    return {
        "broker_url": ends["broker_url"],
        "result_backend": ends["result_backend"],
        "broker_transport_options": {**transport, **ends["transport_extra"]},
        "result_backend_transport_options": {"global_keyprefix": f"{prefix}:celery:", "retry_policy": {
            "max_retries": 10, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 2},
            **ends["transport_extra"]},
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,  # keep trying through a Redis restart
        "result_expires": 24 * 3600,
        # Only jobs someone polls (what-if backtests) keep results; the loop's ticks would flood Redis.
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "timezone": "UTC",
        "enable_utc": True,
        # A task is acknowledged after it ran, so a worker killed mid-run leaves it to another.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": options.queue,
        "task_track_started": True,
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
        # No remote control: its broadcast queue is a Redis pub/sub subscription, and after Redis came
        # back from a restart kombu's event loop read that connection with a blocking read that redis-py
        # had reconnected under it: the worker's main thread waited there for a broadcast that never
        # came and took no task again (py-spy: PubSub.parse_response in MultiChannelPoller.on_readable;
        # the flake of tests/workers/test_processes.py's empty-restart test).  Readiness is a task
        # round trip instead (``warmcast.ping``).
        "worker_enable_remote_control": False,
        "beat_scheduler": "workers.beat:WarmcastScheduler",
        "beat_max_loop_interval": options.beat_loop_s,
        "beat_schedule": beat_schedule(options),
        "redbeat_redis_url": ends["redbeat_redis_url"],
        "redbeat_key_prefix": f"{prefix}:redbeat:",
        "redbeat_lock_key": f"{prefix}:redbeat::lock",
        # A second beat waits on this lock; a dead beat's lock expires after it.
        "redbeat_lock_timeout": max(5 * options.beat_loop_s, 10),
        "redbeat_redis_options": ends["redbeat_redis_options"],
    }


def _tolerate_lost_connection() -> None:
    """Keep a worker alive when Redis drops while it holds unacknowledged messages.

    kombu 5.7, once a connection is lost, still acknowledges a task that finishes in a pool
    thread, and restores the messages the worker holds (ETA retries, running tasks) when it
    closes the channel, both through the connection that is gone: an AttributeError that ends
    the worker ("Unrecoverable error", seen in bench/chaos.py's Redis restart).  Skipping them
    loses nothing: the messages stay in kombu's unacked hash in Redis and the visibility-timeout
    scan (``unacked_restore_interval``) delivers them again; every loop task is idempotent per
    tick, and the worker reconnects like any other.
    """
    from kombu.transport import redis as kombu_redis

    def unless_disconnected(method):
        def call(self, *args, **kw):
            conn = getattr(self.channel, "connection", None)
            if conn is None or getattr(conn, "client", None) is None:
                log.warning("Redis connection lost: %s of %d unacknowledged message(s) left to the visibility "
                            "timeout", method.__name__, len(self._delivered))
                return None
            return method(self, *args, **kw)

        call.__name__ = method.__name__
        return call

    for name in ("ack", "reject", "restore_unacked"):
        setattr(kombu_redis.QoS, name, unless_disconnected(getattr(kombu_redis.QoS, name)))


_tolerate_lost_connection()


class WarmcastCelery(Celery):
    """A Celery app whose configuration is computed from the settings when first needed."""

    def __init__(self, settings=None, options: WorkerOptions | None = None, **kw: Any) -> None:
        self._wc_settings = settings
        self._wc_options = options
        super().__init__("warmcast", include=TASK_MODULES, **kw)

    @property
    def wc_settings(self):
        if self._wc_settings is None:
            from warmcast.config.settings import load_settings

            self._wc_settings = load_settings()
        return self._wc_settings

    @property
    def wc_options(self) -> WorkerOptions:
        if self._wc_options is None:
            self._wc_options = load_options()
        return self._wc_options

    def on_configure(self) -> None:  # called by Celery once, before the configuration is first read
        self.config_from_object(celery_config(self.wc_settings, self.wc_options))


def make_celery(settings=None, options: WorkerOptions | None = None) -> WarmcastCelery:
    """A Celery app for ``settings`` (default: ``load_settings()``, read when first used)."""
    return WarmcastCelery(settings, options)


celery_app = make_celery()
app = celery_app  # `celery -A workers.app` finds either name
