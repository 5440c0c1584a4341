"""The beat scheduler in-process (``workers.beat``), against the real Redis and no beat process."""
from __future__ import annotations

import time

from warmcast.config.settings import load_settings
from workers.app import make_celery
from workers.beat import WarmcastScheduler
from workers.options import WorkerOptions
from workers.schedule import PERIODIC


def test_a_recreated_schedule_is_due_at_once_not_one_interval_later(redis_client, redis_server_url, key_prefix,
                                                                     tmp_path):
    """Issue 31: a Redis that came back empty lost the schedule; RedBeat's own re-creation would first
    fire each entry one interval later (a plan tick lost on top of the state).  Re-created, every
    entry is due now."""
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state")
    app = make_celery(settings, WorkerOptions(plan_every_s=30.0))
    sched = WarmcastScheduler(app=app, lazy=True)
    sched.setup_schedule()  # RedBeat's re-creation alone: each entry due one interval ahead
    names = app.redbeat_conf.schedule
    due = {name: sched.Entry.generate_key(app, name) for name in names}

    def due_in(name: str) -> float:
        return redis_client.zscore(app.redbeat_conf.schedule_key, due[name]) - time.time()

    assert min(due_in(f"warmcast-{kind}") for kind in PERIODIC) > 0.5
    assert sched.due_at_once(names) == len(PERIODIC)
    assert max(due_in(f"warmcast-{kind}") for kind in PERIODIC) <= 0
    assert due_in("warmcast-retrain") > 60  # a daily crontab keeps its hour
