"""Chaos faults on Redis itself (bench/chaos.py, issue 31): the rig's Redis restarted EMPTY (kill -9,
then a fresh data directory: no append-only file), and a Sentinel failover (a master, a replica
and a sentinel from tests/workers/sentinelrig.py, a second worker and beat given the
``sentinel://`` URL, the master killed -9).
"""
from __future__ import annotations

import sys
import time
import uuid


from bench.chaosrig import ROOT, Rig, Row
from warmcast.runtime import wait_until

sys.path.insert(0, str(ROOT / "tests" / "workers"))  # the one Sentinel rig, shared with the tests
from sentinelrig import SentinelRig  # noqa: E402


def _lost_state_audited(rig: Rig, since: float) -> float | None:
    """When 'policy state lost' was audited after ``since`` (None: not yet)."""
    rows = rig.ctx.state.audit_log(rig.dep, kind="state", limit=50)
    times = [rig.audit_time(r) for r in rows if r["decision"] == "policy state lost"]
    return min((t for t in times if t >= since), default=None)


def fault_redis_restart_empty(rig: Rig) -> Row:
    """kill -9 and back on the same port with nothing in it; the simulated fleet (which lives in Redis
    here, where a real fleet would not) is seeded again, as tests/workers/test_processes.py does."""
    from workers.simulate import seed_deployment

    before = rig.stored_minutes()[0]
    bound, bound_note = rig.tick_bound()
    marks = rig.log_marks()
    rig.redis.kill()
    rig.redis.wait(timeout=20)
    (rig.tmp / "redis").rename(rig.tmp / f"redis-before-empty-{uuid.uuid4().hex[:4]}")
    rig.start_redis()
    t_up = time.time()
    seed_deployment(rig.ctx, rig.dep, mean_rpm=80)
    seconds = rig.plan_after(t_up, 90)
    audited = wait_until(lambda: _lost_state_audited(rig, t_up), 30)
    beat_log = rig.procs["beat"].log.read_text(errors="replace")
    recreated = "schedule was missing from Redis" in beat_log
    alive, tb = rig.dead() == [], rig.tracebacks_since(marks)
    ok = seconds is not None and bool(audited) and recreated and alive
    lost_s = f"{audited - t_up:.1f} s after Redis answered" if audited else "no"
    return Row("Redis restart EMPTY (kill -9, no AOF, same port)", ok, seconds,
               f"{before:,} stored minutes (all: empty Redis; re-seeded)", str(rig.double_actions()),
               f"counted from Redis answering again; schedule re-created: {'yes' if recreated else 'no'}; "
               f"'policy state lost' audited: {lost_s}; "
               + ("all processes alive" if alive else f"exited: {rig.dead()}"),
               tracebacks=str(tb), bound_s=bound, bound_note=bound_note)


def _sentinel_ctx(rig: Rig, url: str, prefix: str):
    from warmcast.redisconn import client_for
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.simulate import seed_deployment

    settings = load_settings(redis_url=url, key_prefix=prefix, state_dir=rig.tmp / "state-sentinel",
                             deployments_file=rig.tmp / "deployments.yaml")
    ctx = Ctx(settings, WorkerOptions(simulate=True), client_for(url))
    seed_deployment(ctx, rig.dep, mean_rpm=80)
    return ctx


def _plans(ctx, dep: str) -> list[dict]:
    try:
        return ctx.state.audit_log(dep, kind="scale", limit=2000)
    except Exception:  # noqa: BLE001 - mid-failover reads fail; they are taken again
        return []


def fault_sentinel_failover(rig: Rig) -> Row:
    """The whole loop on sentinel:// URLs; the master dies; it must plan again on the promoted replica."""
    srig = SentinelRig(rig.tmp / "sentinel").start()
    prefix = f"{rig.prefix}-s"
    env = {"WARMCAST_REDIS_URL": srig.url, "WARMCAST_KEY_PREFIX": prefix,
           "WARMCAST_STATE_DIR": str(rig.tmp / "state-sentinel")}
    try:
        ctx = _sentinel_ctx(rig, srig.url, prefix)
        rig.worker("s-worker", env)
        rig.beat("s-beat", env)
        plans = lambda: _plans(ctx, rig.dep)  # noqa: E731
        if not wait_until(lambda: len(plans()) >= 3, 90):
            return Row("Sentinel failover (master kill -9)", False, None, "?", "?", "no plan before the failover")
        bound, bound_note = rig.tick_bound(plans)
        time.sleep(1)  # replication is asynchronous: let the replica have the last writes
        marks, killed = rig.log_marks(), srig.kill_master()
        promoted = srig.wait_promoted(60)
        if not promoted:
            return Row("Sentinel failover (master kill -9)", False, None, "?", "?", "the sentinel promoted no one")
        seconds = rig.plan_after(promoted, 60, plans)
        settled = rig.log_marks()
        n = len(plans())
        more = wait_until(lambda: len(plans()) >= n + 4, 45)
        loop_tb = rig.tracebacks_since(settled)
        alive = all(rig.procs[k].poll() is None for k in ("s-worker", "s-beat"))
        doubles = sum(1 for v in _tick_counts(ctx, rig.dep).values() if v > 1)
        return Row("Sentinel failover (master kill -9)", seconds is not None and bool(more) and alive and loop_tb == 0,
                   seconds, "0", str(doubles),
                   f"promoted {promoted - killed:.1f} s after the kill; seconds counted from the promotion to the "
                   f"first new audited plan; 4 more plans after it: {'yes' if more else 'no'}; tracebacks once "
                   f"recovered: {loop_tb}; " + ("worker and beat alive" if alive else "a process exited"),
                   tracebacks=str(rig.tracebacks_since(marks)), bound_s=bound, bound_note=bound_note)
    finally:
        for name in ("s-worker", "s-beat"):
            if name in rig.procs:
                rig.kill(name)
        srig.stop()


def _tick_counts(ctx, dep: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for a in ctx.scaler(dep).actions():
        if a.get("tick"):
            counts[a["tick"]] = counts.get(a["tick"], 0) + 1
    return counts


FAULTS = (fault_redis_restart_empty, fault_sentinel_failover)
