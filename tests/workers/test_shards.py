"""Shards (issue 44): deployments map to shards by a stable hash, the fan-out sends one task per shard
and kind, and a shard's task runs the same per-deployment tick (lease, journal, audit) for each of its
deployments (real Redis, no worker; tests/workers/test_shards_e2e.py runs it in two worker processes)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from loophelpers import ROOT
from warmcast.config.settings import load_settings
from workers import metrics
from workers.context import Ctx
from workers.fanout import fan_out
from workers.locks import LockBusy, lease
from workers.options import WorkerOptions
from workers.schedule import tick_id
from workers.shardrun import run_shard
from workers.shards import members, shard_of
from workers.simulate import seed_deployment

NAMES = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
FILE = "deployments:\n" + "".join(f"  - name: {n}\n    cold_start_min: 1\n    max_replicas: 10\n    profiles:\n"
                                  f"      day: {{capacity_rpm: 100}}\n" for n in NAMES)


@pytest.fixture
def sctx(tmp_path, redis_client, key_prefix, redis_server_url) -> Ctx:
    deps = tmp_path / "deployments.yaml"
    deps.write_text(FILE)
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    return Ctx(settings, WorkerOptions(simulate=True, shards=2), redis_client)


def test_a_deployments_shard_is_the_same_in_every_process():
    """Python's hash() is salted per process; the shard must not be: two interpreters with other hash
    seeds agree with this one."""
    here = [shard_of(n, 7) for n in NAMES]
    code = f"from workers.shards import shard_of; print([shard_of(n, 7) for n in {NAMES!r}])"
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}).stdout
        assert out.strip() == str(here)
    assert here == [shard_of(n, 7) for n in NAMES] and all(0 <= s < 7 for s in here)


def test_shards_are_balanced_and_partition_the_fleet():
    class D:
        def __init__(self, name: str) -> None:
            self.name = name

    fleet = [D(f"model-{i}-eu-west-a100") for i in range(4000)]
    sizes = Counter(shard_of(d.name, 8) for d in fleet)
    assert len(sizes) == 8 and max(sizes.values()) < 1.15 * 500 and min(sizes.values()) > 0.85 * 500, sizes
    parts = [members(fleet, s, 8) for s in range(8)]
    assert sorted(d.name for p in parts for d in p) == sorted(d.name for d in fleet)
    with pytest.raises(Exception, match="shards must be at least 1"):
        shard_of("x", 0)


def test_fan_out_sends_one_task_per_shard_and_kind(sctx):
    sent: list[tuple[str, dict]] = []
    send = lambda name, **kw: sent.append((name, kw))  # noqa: E731 - records what Celery would get
    n = fan_out(sctx, "plan", "r1", send)
    used = sorted({shard_of(d, 2) for d in NAMES})
    assert n == len(used) == len(sent) and {name for name, _ in sent} == {"warmcast.shard"}
    assert [kw["kwargs"]["shard"] for _, kw in sent] == used
    assert all(kw["kwargs"]["kind"] == "plan" and kw["kwargs"]["shards"] == 2 and kw["expires"] == 54
               for _, kw in sent)
    sent.clear()   # the nightly retrain stays one task per deployment
    assert fan_out(sctx, "retrain", "r2", send) == len(NAMES) and {name for name, _ in sent} == {"warmcast.retrain"}


def next_slot() -> str:
    """The next minute's slot: its expiry is a minute away, whatever second the test starts at."""
    return tick_id(60, time.time() + 60)


def _observed(hist_child) -> float:
    return sum(b.get() for b in hist_child._buckets)


def _scale_ticks(ctx: Ctx, dep: str) -> list[str]:
    return [r["inputs"]["tick"] for r in ctx.state.audit_log(dep, kind="scale", limit=1000)]


def test_a_shard_ticks_each_of_its_deployments_once_per_slot(sctx):
    for i, name in enumerate(NAMES):
        seed_deployment(sctx, name, mean_rpm=150, seed=i)
    tick = next_slot()
    shard0 = [d.name for d in members(sctx.deployments(), 0, 2)]
    delays_before = _observed(metrics.TICK_DELAY.labels("0"))
    res = run_shard(sctx, "plan", 0, 2, tick, "shard-task-1")
    assert res.ran == len(shard0) and not res.failed and not res.late, res
    assert _observed(metrics.TICK_DELAY.labels("0")) == delays_before + len(shard0)   # lateness, per shard
    for name in NAMES:
        assert _scale_ticks(sctx, name) == ([tick] if name in shard0 else [])
    # the same shard task again (a redelivery, a second worker): the journal says the slot is done
    again = run_shard(sctx, "plan", 0, 2, tick, "shard-task-2")
    assert again.ran == len(shard0) and all(_scale_ticks(sctx, n) == [tick] for n in shard0)
    assert all(len(sctx.scaler(n).actions()) <= 1 for n in shard0)


def test_one_deployments_failure_is_its_own_and_a_busy_lease_is_retried_alone(sctx):
    for i, name in enumerate(("alpha", "bravo")):
        seed_deployment(sctx, name, mean_rpm=150, seed=i)
    tick = next_slot()
    before = metrics.TASK_FAILURES.labels("warmcast.plan", "NotFoundError")._value.get()
    with lease(sctx.r, sctx.prefix, "plan", "bravo", 30, token="someone-else"):
        res = run_shard(sctx, "plan", 0, 2, tick, "t1", only=["nope", "alpha", "bravo"], transient=(LockBusy,))
    assert res.ran == 1 and list(res.failed) == ["nope"] and res.transient == ["bravo"], res
    assert "unknown deployment 'nope'" in res.failed["nope"]
    assert metrics.TASK_FAILURES.labels("warmcast.plan", "NotFoundError")._value.get() == before + 1
    assert _scale_ticks(sctx, "alpha") == [tick] and _scale_ticks(sctx, "bravo") == []


def test_deployments_a_shard_reaches_after_the_slots_expiry_are_dropped_and_audited(sctx):
    """A shard that runs past its slot's expiry does not tick the rest late: they are counted as
    dropped (late) and each one's audit says so; the next tick decides from fresh signals."""
    old = "2020-01-01T00:00:00"
    shard0 = [d.name for d in members(sctx.deployments(), 0, 2)]
    before = metrics.DROPPED.labels("plan", "late", "0")._value.get()
    res = run_shard(sctx, "plan", 0, 2, old, "t1")
    assert res.ran == 0 and res.late == shard0
    assert metrics.DROPPED.labels("plan", "late", "0")._value.get() == before + 1
    for name in shard0:
        rows = sctx.state.audit_log(name, kind="skipped")
        assert [r["inputs"]["tick"] for r in rows] == [old] and "after the slot's expiry" in rows[0]["reason"]
        assert _scale_ticks(sctx, name) == []
