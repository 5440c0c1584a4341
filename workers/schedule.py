"""The beat schedule (RedBeat keeps it in Redis, and its lock lets only one beat fire it).

Each periodic entry fans out: beat sends ``warmcast.fanout(kind)``, which sends one
task per deployment carrying the schedule slot (``tick``) it belongs to, so a
redelivered message is recognised as the same tick.  Every entry and every
per-deployment task has ``expires``: a message that waited past its usefulness
(a stale scrape, a tick from minutes ago) is dropped, not run late.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from celery.schedules import crontab, schedule

from workers.options import WorkerOptions

# kind -> (option holding the interval, task name)
PERIODIC = {
    "scrape": ("scrape_every_s", "warmcast.scrape"),
    "ingest": ("ingest_every_s", "warmcast.ingest"),
    "forecast": ("forecast_every_s", "warmcast.forecast"),
    "plan": ("plan_every_s", "warmcast.plan"),   # the one tick: scale, sleep tier, switch, warmups
    "expire": ("expire_every_s", "warmcast.expire"),
    "alerts": ("alert_check_every_s", "warmcast.alert_check"),  # workers/tasks.py
}


def every(options: WorkerOptions, kind: str) -> float:
    if kind == "retrain":
        return 24 * 3600.0
    return float(getattr(options, PERIODIC[kind][0]))


def expires_for(options: WorkerOptions, kind: str) -> float:
    """A run is worth doing until shortly before the next one is due."""
    return max(1.0, 0.9 * every(options, kind))


def beat_schedule(options: WorkerOptions) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in PERIODIC:
        s = every(options, kind)
        out[f"warmcast-{kind}"] = {"task": "warmcast.fanout", "schedule": schedule(s), "kwargs": {"kind": kind},
                                   "options": {"expires": expires_for(options, kind)}}
    out["warmcast-retrain"] = {"task": "warmcast.fanout", "kwargs": {"kind": "retrain"},
                               "schedule": crontab(minute=17, hour=options.retrain_hour_utc),
                               "options": {"expires": 3 * 3600}}
    # once for the fleet, after the deployments' own retrains: it is judged against their new champions
    out["warmcast-retrain-fleet"] = {"task": "warmcast.retrain_fleet", "schedule": crontab(
        minute=47, hour=(options.retrain_hour_utc + 1) % 24), "options": {"expires": 3 * 3600}}
    return out


def tick_id(every_s: float, now: float | None = None) -> str:
    """The schedule slot a run belongs to (same for a redelivery of the same message).

    Slots are ``YYYY-MM-DDTHH:MM:SS`` strings, so comparing two of them orders them in time.
    """
    now = time.time() if now is None else now
    slot = int(now // every_s) * every_s
    return datetime.fromtimestamp(slot, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def claim_slot(r: Any, prefix: str, kind: str, tick: str, every_s: float, run_id: str) -> bool:
    """True for the first fan-out of ``kind`` in slot ``tick``; False for any other (a second
    beat, or a fan-out message redelivered after a lost acknowledgement landing in a later slot),
    which must send nothing.  The claim outlives the slot, so a late duplicate still finds it."""
    return bool(r.set(f"{prefix}:fanout-claim:{kind}|{tick}", run_id or "?", nx=True,
                      ex=int(max(60.0, 4 * every_s))))
