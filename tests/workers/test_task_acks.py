"""Issue 41 (found by bench/chaos.py round three): a task that outlives the broker's visibility timeout is
redelivered while it still runs, and its copy takes its lease (same task id).  One nightly retrain ran 12
times side by side and starved the minute loop for half an hour.  Long tasks are acknowledged when they
start; the minute loop's short tasks are acknowledged after they ran (a dead worker's tick comes back)."""
from __future__ import annotations

from workers.app import make_celery
from workers.options import WorkerOptions

LONG = ("warmcast.retrain", "warmcast.whatif_backtest")
MINUTE_LOOP = ("warmcast.fanout", "warmcast.scrape", "warmcast.forecast", "warmcast.plan", "warmcast.ingest")


def test_long_tasks_are_acknowledged_at_their_start_and_the_loops_after_they_ran() -> None:
    app = make_celery(None, WorkerOptions())
    import workers.tasks  # noqa: F401 - registers the tasks

    assert all(app.tasks[name].acks_late is False for name in LONG)
    assert all(app.tasks[name].acks_late is True for name in MINUTE_LOOP)
    # every loop task is short beside the visibility timeout the loop runs with
    assert WorkerOptions().visibility_timeout_s >= 5 * WorkerOptions().plan_every_s
