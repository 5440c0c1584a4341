"""Shards through REAL processes (issue 44): two worker processes and the beat, the fan-out sending one
task per shard, and every shard task of each slot sent a second time on purpose, so both workers hold
the same shard's slot at once.  No deployment is ticked twice in a slot (the lease and the journal
decide), and no slot goes missing in silence: each is decided or audited as skipped."""
from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from loophelpers import ctx_for, wait_for
from workers.schedule import tick_id
from workers.simulate import seed_deployment

pytestmark = pytest.mark.integration

NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
FILE = "deployments:\n" + "".join(f"  - name: {n}\n    cold_start_min: 0.1\n    max_replicas: 10\n    profiles:\n"
                                  f"      day: {{capacity_rpm: 100}}\n" for n in NAMES)
SHARDS, EVERY = 3, 2.0
SLOT = "%Y-%m-%dT%H:%M:%S"


def _start(slot: str) -> float:
    return datetime.strptime(slot, SLOT).replace(tzinfo=timezone.utc).timestamp()


def _ticks(ctx, dep: str, kind: str) -> list[str]:
    return [r["inputs"]["tick"] for r in ctx.state.audit_log(dep, kind=kind, limit=2000)]


def _sharded(make_loop):
    """(loop, ctx, the first worker): two workers and the beat, every deployment ticked once."""
    loop = make_loop(deployments=FILE, env={"WARMCAST_WORKERS_SHARDS": str(SHARDS),
                                            "WARMCAST_WORKERS_FORECAST_EVERY_S": "3600",
                                            "WARMCAST_WORKERS_INGEST_EVERY_S": "3600"})
    ctx = ctx_for(loop)
    for i, name in enumerate(NAMES):
        seed_deployment(ctx, name, mean_rpm=150, seed=i)
    first = loop.worker()
    loop.worker()
    loop.beat()
    wait_for(lambda: all(_ticks(ctx, n, "scale") for n in NAMES), 60, "every deployment's first tick", loop)
    return loop, ctx, first


def test_two_workers_with_shards_tick_each_deployment_at_most_once_per_slot(make_loop):
    loop, ctx, _ = _sharded(make_loop)
    from workers.app import make_celery

    app = make_celery(ctx.settings, ctx.options)
    end = time.time() + 8 * EVERY
    while time.time() < end:   # every shard task of the slot a second time, beside the beat's
        tick = tick_id(EVERY)
        for s in range(SHARDS):
            app.send_task("warmcast.shard", kwargs={"kind": "plan", "shard": s, "shards": SHARDS, "tick": tick},
                          expires=0.9 * EVERY, queue="warmcast")
        time.sleep(EVERY / 2)
    time.sleep(2 * EVERY)
    for name in NAMES:
        decided = _ticks(ctx, name, "scale")
        twice = {t: n for t, n in Counter(decided).items() if n > 1}
        assert not twice, f"{name}: ticked twice in {twice}"
        acted = Counter(a["tick"] for a in ctx.scaler(name).actions() if a.get("tick"))
        assert max(acted.values(), default=0) <= 1, f"{name}: acted twice in one tick: {acted}"
        # every slot from the first decided to the last is decided or audited as skipped (none silent)
        seen = set(decided) | set(_ticks(ctx, name, "skipped"))
        t, last = datetime.strptime(min(decided), SLOT), datetime.strptime(max(decided), SLOT)
        missing = []
        while t <= last:
            if t.strftime(SLOT) not in seen:
                missing.append(t.strftime(SLOT))
            t += timedelta(seconds=EVERY)
        assert not missing, f"{name}: slots neither decided nor audited as skipped: {missing}\n{loop.logs()}"
        assert len(decided) >= 6, (name, decided)
    assert "Traceback" not in loop.logs()


def test_a_killed_workers_shards_move_to_the_other_within_a_minute_none_doubled(make_loop):
    """Issue 44: kill one of two workers mid-run (SIGKILL, no goodbye): the other takes every shard's
    next ticks (one queue, any worker takes any shard's task), and none is ticked twice."""
    loop, ctx, doomed = _sharded(make_loop)
    time.sleep(3 * EVERY)
    killed_at = time.time()
    loop.kill(doomed)
    time.sleep(10 * EVERY)
    resumed = {}
    for name in NAMES:
        decided = _ticks(ctx, name, "scale")
        twice = {t: n for t, n in Counter(decided).items() if n > 1}
        assert not twice, f"{name}: ticked twice in {twice}"
        after = sorted(t for t in decided if _start(t) > killed_at)
        assert after, f"{name}: no tick after the kill\n{loop.logs()}"
        resumed[name] = _start(after[0]) - killed_at
        assert len(after) >= 5, (name, after)   # and it goes on being ticked
    print(f"first tick after the kill, s: {resumed}")
    assert max(resumed.values()) <= 60.0, resumed
