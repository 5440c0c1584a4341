"""Issue 31: the loop through a Redis Sentinel failover, with REAL servers and processes.

A master, a replica and a sentinel (tests/workers/sentinelrig.py); a Celery worker and RedBeat
beat on a simulated fleet, every Redis client (store, broker, result backend, RedBeat) given
the ``sentinel://`` URL.  The master is killed -9; once the sentinel promotes the replica the
loop must plan and audit again within a bounded number of ticks, with no traceback loop.
"""
from __future__ import annotations

import time

import pytest
import redis

from loophelpers import ctx_for, wait_for
from sentinelrig import SentinelRig
from workers.simulate import seed_deployment

pytestmark = pytest.mark.integration

PLAN_EVERY_S = 3
RECOVER_TICKS = 12  # ticks allowed from promotion to a new audited plan (the first is usually 1-3)


def _audits(ctx) -> int:
    """Audited plans; -1 while the test's own read fails (the sentinel may name the new master a
    moment before it lists it as healthy: MasterNotFoundError, a ConnectionError)."""
    try:
        return len(ctx.state.audit_log("simdep", kind="scale", limit=10_000))
    except redis.ConnectionError:
        return -1


def test_loop_keeps_ticking_through_a_sentinel_failover(make_loop, tmp_path):
    rig = SentinelRig(tmp_path / "redis").start()
    try:
        loop = make_loop(redis_url=rig.url, env={"WARMCAST_WORKERS_PLAN_EVERY_S": str(PLAN_EVERY_S)})
        ctx = ctx_for(loop)
        seed_deployment(ctx, "simdep", mean_rpm=80)
        loop.worker()
        loop.beat()
        wait_for(lambda: _audits(ctx) >= 2, 90, "plan ticks before the failover", loop)
        time.sleep(1)  # the replica has the audits too (replication is asynchronous)
        killed = rig.kill_master()
        promoted = rig.wait_promoted(60)
        assert promoted, f"the sentinel did not promote the replica (logs in {rig.tmp})"
        at_promotion = wait_for(lambda: _audits(ctx) + 1, 10, "a read after the promotion", loop) - 1
        wait_for(lambda: _audits(ctx) >= at_promotion + 2, RECOVER_TICKS * PLAN_EVERY_S,
                 f"two new audited plans within {RECOVER_TICKS} ticks of the promotion "
                 f"({promoted - killed:.1f} s after the kill)", loop)
        # then it keeps going, and what the processes log from here on is free of tracebacks
        mark = {p.log_path: p.log_path.stat().st_size for p in loop.procs}
        settled = _audits(ctx)
        wait_for(lambda: _audits(ctx) >= settled + 3, 8 * PLAN_EVERY_S, "ticks after recovery", loop)
        later = "".join(path.read_text()[size:] for path, size in mark.items())
        assert "Traceback" not in later, later[-4000:]
        assert all(p.poll() is None for p in loop.procs), loop.logs()
        assert ctx.r.connection_pool.get_master_address()[1] == rig.replica_port
    finally:
        for loop_proc in loop.procs if "loop" in locals() else []:
            loop.kill(loop_proc, 15)  # before the servers, so they do not log a lost master at exit
        rig.stop()


def test_the_rig_picks_other_ports_where_another_process_took_its_own(tmp_path):
    """The rig's free ports come from the range every client's connections use: one was taken between
    picking and binding in a CI run beside the rest of the suite ('Address already in use', the
    sentinel never up).  Here its sentinel and master ports are held on purpose: it starts on others."""
    import socket

    rig = SentinelRig(tmp_path / "redis")
    held = []
    for port in (rig.sentinel_port, rig.master_port):
        s = socket.socket()
        s.bind(("127.0.0.1", port))
        s.listen()
        held.append((s, port))
    try:
        rig.start()
        assert rig.sentinel_port != held[0][1] and rig.master_port != held[1][1]
        assert rig.master_port_now() == rig.master_port
    finally:
        rig.stop()
        for s, _ in held:
            s.close()
