"""Nothing lost in silence (issue 44), at the handler: a task Celery dropped unrun is counted per kind,
why and shard, ledgered in Redis, and a lost tick is audited per deployment (real Redis, no worker;
tests/workers/test_dropped_e2e.py drops them through a real worker process)."""
from __future__ import annotations

from workers import dropped, metrics
from workers.fanout import fan_out

SLOT = "2030-01-01T01:27:00"


def _count(kind: str, why: str, shard: str) -> float:
    return metrics.DROPPED.labels(kind, why, shard)._value.get()


def _skipped(ctx, dep: str) -> list[dict]:
    return ctx.state.audit_log(dep, kind="skipped", limit=100)


def test_an_expired_tick_is_counted_ledgered_and_audited_once(ctx):
    before = _count("plan", "expired", "-")
    n = dropped.note(ctx, "warmcast.plan", {"deployment": "simdep", "tick": SLOT}, "expired",
                     "2030-01-01T01:27:54+00:00", task_id="t-1")
    assert n == 1 and _count("plan", "expired", "-") == before + 1
    assert ctx.r.hgetall(f"{ctx.prefix}:dropped:2030-01-01") == {f"plan|{SLOT}|expired".encode(): b"1"}
    rows = _skipped(ctx, "simdep")
    assert [r["decision"] for r in rows] == [f"tick {SLOT} skipped"]
    assert "waited in the queue past its expiry (2030-01-01T01:27:54+00:00)" in rows[0]["reason"]
    assert "not run late" in rows[0]["reason"] and rows[0]["inputs"] == {"tick": SLOT, "why": "expired"}
    # the same message dropped again (a redelivery) counts and audits nothing more
    assert dropped.note(ctx, "warmcast.plan", {"deployment": "simdep", "tick": SLOT}, "expired", task_id="t-1") == 0
    assert _count("plan", "expired", "-") == before + 1 and len(_skipped(ctx, "simdep")) == 1


def test_a_dropped_redelivery_of_a_tick_that_ran_is_counted_not_audited(ctx):
    """The journal says the slot ran (its own tick), or a newer tick ran and the audit has the slot's
    decision: the message is counted as dropped, no deployment is told its tick was lost."""
    ctx.state.put("plan-journal", "simdep", {"tick": SLOT, "status": "applied"})
    assert dropped.note(ctx, "warmcast.plan", {"deployment": "simdep", "tick": SLOT}, "expired") == 0
    ctx.state.audit("simdep", "scale", "hold 1->1", "r", True, "", {"tick": SLOT})
    ctx.state.put("plan-journal", "simdep", {"tick": "2030-01-01T01:30:00", "status": "applied"})
    assert dropped.note(ctx, "warmcast.plan", {"deployment": "simdep", "tick": SLOT}, "expired") == 0
    assert _skipped(ctx, "simdep") == []
    # a newer tick ran but this slot has no decision in the audit: it was lost
    other = "2030-01-01T01:28:00"
    assert dropped.note(ctx, "warmcast.plan", {"deployment": "simdep", "tick": other}, "expired") == 1
    assert [r["inputs"]["tick"] for r in _skipped(ctx, "simdep")] == [other]


def test_a_dropped_scrape_is_counted_and_not_audited_as_a_lost_tick(ctx):
    before = _count("scrape", "rejected", "-")
    assert dropped.note(ctx, "warmcast.scrape", {"deployment": "simdep", "tick": SLOT}, "rejected") == 0
    assert _count("scrape", "rejected", "-") == before + 1 and _skipped(ctx, "simdep") == []


def test_a_dropped_shard_task_is_counted_under_its_shard_and_audits_its_deployments(ctx):
    before = _count("plan", "expired", "0")
    n = dropped.note(ctx, dropped.SHARD, {"kind": "plan", "shard": 0, "shards": 1, "tick": SLOT}, "expired")
    assert n == len(ctx.deployments()) and _count("plan", "expired", "0") == before + 1
    assert all(len(_skipped(ctx, d.name)) == 1 for d in ctx.deployments())


def test_a_dropped_fan_out_is_named_by_the_next_fan_outs_gap_audit(ctx):
    """The fan-out of 01:28 expired in the queue: the fan-out of 01:29 finds the gap, as for a beat that
    did not fire, and the audit names the real cause."""
    send = lambda name, **kw: None  # noqa: E731 - no Celery here
    assert fan_out(ctx, "plan", "r1", send, tick="2030-01-01T01:27:00") > 0
    assert dropped.note(ctx, dropped.FANOUT, {"kind": "plan", "tick": "2030-01-01T01:28:00"}, "expired") == 0
    assert fan_out(ctx, "plan", "r2", send, tick="2030-01-01T01:29:00") > 0
    rows = _skipped(ctx, "simdep")
    assert [r["inputs"]["tick"] for r in rows] == ["2030-01-01T01:28:00"]
    assert "fan-out task was dropped unrun (expired" in rows[0]["reason"], rows[0]["reason"]
    assert "beat did not fire" not in rows[0]["reason"]


def test_kwargs_of_a_revoked_request_read_from_its_repr():
    """A revoked task's context carries its arguments as a repr only, cut at 1024 characters."""
    class Request:
        kwargs = None
        kwargsrepr = "{'deployment': 'a', 'tick': '2030-01-01T00:01:00'}"

    assert dropped.kwargs_of(Request()) == {"deployment": "a", "tick": "2030-01-01T00:01:00"}
    Request.kwargsrepr = "{'kind': 'plan', 'shard': 3, 'shards': 8, 'tick': '2030-01-01T00:01:00', 'only': ['a', 'b"
    assert dropped.kwargs_of(Request()) == {"kind": "plan", "shard": 3, "shards": 8, "tick": "2030-01-01T00:01:00"}
