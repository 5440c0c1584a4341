"""Chaos faults on Redis itself (bench/chaos.py, issue 31): the rig's Redis restarted EMPTY (kill -9,
then a fresh data directory: no append-only file), and a Sentinel failover (a master, a replica
and a sentinel from tests/workers/sentinelrig.py, a second worker and beat given the
``sentinel://`` URL, the master killed -9).
"""
from __future__ import annotations

import sys
import time
import uuid

import pandas as pd

from bench.chaosrig import ROOT, Rig, Row
from warmcast.runtime import wait_until

sys.path.insert(0, str(ROOT / "tests" / "workers"))  # the one Sentinel rig, shared with the tests
from sentinelrig import SentinelRig  # noqa: E402


def _lost_state_audited(rig: Rig, since: float) -> bool:
    rows = rig.ctx.state.audit_log(rig.dep, kind="state", limit=50)
    return any(r["decision"] == "policy state lost" and pd.Timestamp(r["ts"], tz="UTC").timestamp() >= since - 1
               for r in rows)


def fault_redis_restart_empty(rig: Rig) -> Row:
    """kill -9 and back on the same port with nothing in it; the simulated fleet (which lives in Redis
    here, where a real fleet would not) is seeded again, as tests/workers/test_processes.py does."""
    from workers.simulate import seed_deployment

    before = rig.stored_minutes()[0]
    marks = rig.log_marks()
    rig.redis.kill()
    rig.redis.wait(timeout=20)
    (rig.tmp / "redis").rename(rig.tmp / f"redis-before-empty-{uuid.uuid4().hex[:4]}")
    rig.start_redis()
    t_up = time.time()
    seed_deployment(rig.ctx, rig.dep, mean_rpm=80)
    fresh = wait_until(lambda: [r for r in rig.plan_audits() if rig.tick_time(r) > t_up], 90)
    seconds = time.time() - t_up if fresh else None
    audited = wait_until(lambda: _lost_state_audited(rig, t_up), 30)
    beat_log = rig.procs["beat"].log.read_text(errors="replace")
    recreated = "schedule was missing from Redis" in beat_log
    alive, tb = rig.dead() == [], rig.tracebacks_since(marks)
    ok = bool(fresh) and bool(audited) and recreated and alive
    return Row("Redis restart EMPTY (kill -9, no AOF, same port)", ok, seconds,
               f"{before:,} stored minutes (all: empty Redis; re-seeded)", str(rig.double_actions()),
               f"schedule re-created: {'yes' if recreated else 'no'}; 'policy state lost' audited: "
               f"{'yes' if audited else 'no'}; " + ("all processes alive" if alive else f"exited: {rig.dead()}"),
               tracebacks=str(tb))


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


def _audits(ctx, dep: str) -> int:
    try:
        return len(ctx.state.audit_log(dep, kind="scale", limit=10_000))
    except Exception:  # noqa: BLE001 - mid-failover reads fail; the count is taken again
        return -1


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
        if not wait_until(lambda: _audits(ctx, rig.dep) >= 2, 90):
            return Row("Sentinel failover (master kill -9)", False, None, "?", "?", "no plan before the failover")
        time.sleep(1)  # replication is asynchronous: let the replica have the last writes
        marks, killed = rig.log_marks(), srig.kill_master()
        promoted = srig.wait_promoted(60)
        if not promoted:
            return Row("Sentinel failover (master kill -9)", False, None, "?", "?", "the sentinel promoted no one")
        n = _audits(ctx, rig.dep)
        fresh = wait_until(lambda: _audits(ctx, rig.dep) >= n + 2, 60)
        seconds = time.time() - promoted if fresh else None
        settled = rig.log_marks()
        more = wait_until(lambda: _audits(ctx, rig.dep) >= n + 5, 45)
        loop_tb = rig.tracebacks_since(settled)
        alive = all(rig.procs[k].poll() is None for k in ("s-worker", "s-beat"))
        doubles = sum(1 for v in _tick_counts(ctx, rig.dep).values() if v > 1)
        return Row("Sentinel failover (master kill -9)", bool(fresh) and bool(more) and alive and loop_tb == 0,
                   seconds, "0", str(doubles),
                   f"promoted {promoted - killed:.1f} s after the kill; seconds counted from the promotion to the "
                   f"2nd new audited plan; tracebacks once recovered: {loop_tb}; "
                   + ("worker and beat alive" if alive else "a process exited"),
                   tracebacks=str(rig.tracebacks_since(marks)))
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
