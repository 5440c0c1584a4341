"""Nothing lost in silence (issue 44) through a REAL worker process: a queue backed up while no worker
ran, so a tick, a shard's tick and a scrape expired in it; the worker that starts drops them unrun,
and its /metrics and each deployment's audit say so."""
from __future__ import annotations

import time

import httpx
import pytest

from loophelpers import ctx_for, free_port, wait_for

pytestmark = pytest.mark.integration

DEPLOYMENTS = """
deployments:
  - name: a
    profiles:
      day: {capacity_rpm: 100}
  - name: b
    profiles:
      day: {capacity_rpm: 100}
"""


def _metric(port: int, line_start: str) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.ConnectError:   # the worker's metrics server is not up yet
        return None
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_ticks_expired_in_a_backed_up_queue_show_in_metrics_and_in_each_audit(make_loop):
    port = free_port()
    loop = make_loop(deployments=DEPLOYMENTS, env={"WARMCAST_WORKERS_METRICS_PORT": str(port)})
    ctx = ctx_for(loop)
    from workers.app import make_celery

    app = make_celery(ctx.settings, ctx.options)
    slot, shard_slot = "2030-01-01T00:00:00", "2030-01-01T00:01:00"
    # no worker runs: the messages wait past their expiry, as behind a backed-up queue or a paused worker
    app.send_task("warmcast.plan", kwargs={"deployment": "a", "tick": slot}, expires=1, queue="warmcast")
    app.send_task("warmcast.shard", kwargs={"kind": "plan", "shard": 0, "shards": 1, "tick": shard_slot},
                  expires=1, queue="warmcast")
    app.send_task("warmcast.scrape", kwargs={"deployment": "b", "tick": slot}, expires=1, queue="warmcast")
    # a task this worker does not know (a beat newer than the worker): refused, and counted too
    app.send_task("warmcast.not_yet", kwargs={"deployment": "b", "tick": slot}, queue="warmcast")
    time.sleep(1.5)
    loop.worker()
    wait_for(lambda: len(ctx.state.audit_log("b", kind="skipped")) >= 1, 60, "b's lost tick audited", loop)
    wait_for(lambda: _metric(port, 'warmcast_dropped_tasks_total{kind="scrape",shard="-",why="expired"}'), 30,
             "the expired scrape counted", loop)
    assert _metric(port, 'warmcast_dropped_tasks_total{kind="plan",shard="-",why="expired"}') == 1.0
    assert _metric(port, 'warmcast_dropped_tasks_total{kind="plan",shard="0",why="expired"}') == 1.0
    wait_for(lambda: _metric(port, 'warmcast_dropped_tasks_total{kind="warmcast.not_yet",shard="-",why="unknown"}'),
             30, "the unknown task counted", loop)
    ticks = {d: sorted(r["inputs"]["tick"] for r in ctx.state.audit_log(d, kind="skipped")) for d in "ab"}
    assert ticks == {"a": [slot, shard_slot], "b": [shard_slot]}, ticks
    row = ctx.state.audit_log("a", kind="skipped")[-1]
    assert "past its expiry" in row["reason"] and "not run late" in row["reason"], row
    assert ctx.state.audit_log("a", kind="scale") == []   # dropped means not run, late or otherwise
    ledger = {k.decode(): int(v) for k, v in ctx.r.hgetall(f"{ctx.prefix}:dropped:2030-01-01").items()}
    assert ledger == {f"plan|{slot}|expired": 1, f"plan|{shard_slot}|expired": 2, f"scrape|{slot}|expired": 1,
                      f"warmcast.not_yet|{slot}|unknown": 1}
    # Celery logs the unregistered task with its own traceback; counting a drop never fails
    assert "could not record a dropped task" not in loop.logs()


def test_each_kind_s_cpu_shows_in_metrics_a_shard_task_under_its_kind(make_loop):
    """warmcast_step_cpu_seconds_total: the CPU of the thread that ran each task, by schedule kind (a
    shard task counts under the kind it runs, a per-deployment task under its own), so bench/scale
    and an operator can see what a deployment costs a minute, step by step."""
    port = free_port()
    loop = make_loop(deployments=DEPLOYMENTS, env={"WARMCAST_WORKERS_METRICS_PORT": str(port)})
    ctx = ctx_for(loop)
    from workers.app import make_celery

    app = make_celery(ctx.settings, ctx.options)
    loop.worker()
    app.send_task("warmcast.shard", kwargs={"kind": "plan", "shard": 0, "shards": 1}, queue="warmcast")
    app.send_task("warmcast.scrape", kwargs={"deployment": "b"}, queue="warmcast")
    wait_for(lambda: _metric(port, 'warmcast_step_cpu_seconds_total{kind="plan"}'), 60, "the shard's plan CPU", loop)
    wait_for(lambda: _metric(port, 'warmcast_step_cpu_seconds_total{kind="scrape"}'), 60, "the scrape's CPU", loop)
    assert _metric(port, 'warmcast_step_cpu_seconds_total{kind="plan"}') > 0
    assert _metric(port, 'warmcast_step_cpu_seconds_total{kind="warmcast.shard"}') is None   # counted by kind
