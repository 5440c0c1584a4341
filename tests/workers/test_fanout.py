"""The fan-out on its own (``workers.fanout``), against the real Redis and no Celery worker."""
from __future__ import annotations

from workers.fanout import fan_out


def test_fan_out_sends_one_task_per_deployment_once_per_slot(ctx):
    sent: list[tuple[str, dict]] = []
    send = lambda name, **kw: sent.append((name, kw))  # noqa: E731 - records what Celery would get
    n = fan_out(ctx, "plan", "run-1", send)
    names = [d.name for d in ctx.deployments()]
    assert n == len(names) == len(sent) and [kw["kwargs"]["deployment"] for _, kw in sent] == names
    assert {name for name, _ in sent} == {"warmcast.plan"}
    tick = sent[0][1]["kwargs"]["tick"]
    assert fan_out(ctx, "plan", "run-2", send) == 0 and len(sent) == n   # the slot is claimed
    runs = ctx.r.hgetall(f"{ctx.prefix}:fanout-runs:{tick[:10]}")
    sent_ledger = ctx.r.hgetall(f"{ctx.prefix}:fanout-sent:{tick[:10]}")
    assert runs[f"plan|{tick}".encode()] == b"2" and sent_ledger[f"plan|{tick}".encode()] == b"1"
    assert ctx.r.hget(f"{ctx.prefix}:fanout-total", "plan") == b"2"
