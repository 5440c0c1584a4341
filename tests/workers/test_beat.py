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
    sched.setup_schedule()  # RedBeat's re-creation alone: each entry due at its next boundary, not now
    names = app.redbeat_conf.schedule
    due = {name: sched.Entry.generate_key(app, name) for name in names}

    def due_in(name: str) -> float:
        return redis_client.zscore(app.redbeat_conf.schedule_key, due[name]) - time.time()

    assert sched.due_at_once(names) == len(PERIODIC)
    assert max(due_in(f"warmcast-{kind}") for kind in PERIODIC) <= 0
    assert due_in("warmcast-retrain") > 60  # a daily crontab keeps its hour


def _locked_scheduler(app, cls=WarmcastScheduler, lock_timeout: int = 1):
    """A scheduler holding the schedule lock as a started beat does (RedBeat's beat_init handler)."""
    from types import SimpleNamespace

    from redbeat.schedulers import acquire_distributed_beat_lock

    sched = cls(app=app, lazy=True, lock_timeout=lock_timeout)
    sched.setup_schedule()
    acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=sched))
    assert sched.lock is not None and sched.lock.owned()
    return sched


def test_a_tick_that_stalls_past_the_lock_timeout_does_not_kill_the_beat(redis_server_url, key_prefix, tmp_path):
    """Issue 41 finding 1: a tick stalled past the lock's timeout (here 1 s) lost the lock inside RedBeat's
    own tick, whose LockNotOwnedError nothing caught: the beat exited and the loop stopped.  The stalled
    tick now returns, and the next one takes the lock again."""
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state")
    app = make_celery(settings, WorkerOptions(plan_every_s=30.0))

    class Stalling(WarmcastScheduler):
        stall_s = 1.6

        def _ensure_schedule(self) -> None:  # a stall inside the tick, after the lock was extended
            time.sleep(self.stall_s)
            self.stall_s = 0.0
            super()._ensure_schedule()

    sched = _locked_scheduler(app, Stalling)
    wait = sched.tick()          # raised LockNotOwnedError before the fix
    assert 0 < wait <= sched.max_interval
    sched.tick()
    assert sched.lock.owned()    # taken again at the next check: the beat goes on firing
    sched.close()


def test_a_second_beat_holding_the_lost_lock_makes_the_first_stand_by(redis_client, redis_server_url, key_prefix,
                                                                      tmp_path):
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state")
    app = make_celery(settings, WorkerOptions(plan_every_s=30.0))
    sched = _locked_scheduler(app)
    redis_client.set(sched.lock_key, "another-beat", px=5000)   # the lock lapsed and another beat took it
    assert sched.tick() == sched.max_interval                    # stands by, sends nothing, stays alive
    assert redis_client.get(sched.lock_key) == b"another-beat"


def test_interval_entries_fall_due_on_the_boundary_not_one_interval_after_a_late_run(redis_server_url, key_prefix,
                                                                                     tmp_path):
    """Issue 41 finding 6: plan ticks at 01:27:47 then 01:29:04 left minute 01:28 without a tick.  An
    interval entry run late at 01:27:47 is next due at 01:28:00, the minute's own boundary."""
    from datetime import datetime, timedelta, timezone

    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state")
    app = make_celery(settings, WorkerOptions(plan_every_s=60.0, scrape_every_s=10.0))
    sched = WarmcastScheduler(app=app, lazy=True)
    sched.setup_schedule()
    plan = sched.Entry.from_key(sched.Entry.generate_key(app, "warmcast-plan"), app=app)
    scrape = sched.Entry.from_key(sched.Entry.generate_key(app, "warmcast-scrape"), app=app)
    late = datetime(2026, 1, 1, 1, 27, 47, tzinfo=timezone.utc)
    plan.last_run_at, scrape.last_run_at = late, late
    assert plan.due_at == datetime(2026, 1, 1, 1, 28, tzinfo=timezone.utc)
    assert scrape.due_at == datetime(2026, 1, 1, 1, 27, 50, tzinfo=timezone.utc)
    plan.last_run_at = app.now() - timedelta(seconds=61)
    due, wait = plan.is_due()
    assert due and 0 < wait <= 60
    retrain = sched.Entry.from_key(sched.Entry.generate_key(app, "warmcast-retrain"), app=app)
    assert retrain.every_s() is None   # the nightly crontab keeps RedBeat's own rule
