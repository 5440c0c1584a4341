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


def test_a_slot_the_beat_never_fired_in_is_counted_and_audited_per_deployment(ctx):
    """Issue 41 finding 6: a slot no tick served must not go missing in silence.  The beat fired for
    01:27 and then 01:29 (stalled across 01:28): 01:28 is in the skipped ledger and each deployment's
    audit says why it was not run late; the tick of 01:29 serves it."""
    from workers import metrics

    sent: list[tuple[str, dict]] = []
    send = lambda name, **kw: sent.append((name, kw))  # noqa: E731
    before = metrics.SKIPPED_SLOTS.labels("plan")._value.get()
    assert fan_out(ctx, "plan", "r1", send, tick="2030-01-01T01:27:00") > 0
    assert fan_out(ctx, "plan", "r2", send, tick="2030-01-01T01:29:00") > 0
    assert {kw["kwargs"]["tick"] for _, kw in sent} == {"2030-01-01T01:27:00", "2030-01-01T01:29:00"}
    skipped = ctx.r.hgetall(f"{ctx.prefix}:fanout-skipped:2030-01-01")
    assert skipped == {b"plan|2030-01-01T01:28:00": b"2030-01-01T01:29:00"}
    assert metrics.SKIPPED_SLOTS.labels("plan")._value.get() == before + 1
    for d in ctx.deployments():
        rows = ctx.state.audit_log(d.name, kind="skipped")
        assert [r["decision"] for r in rows] == ["tick 2030-01-01T01:28:00 skipped"], rows
        assert "beat did not fire" in rows[0]["reason"] and rows[0]["outcome"] == "superseded by tick 2030-01-01T01:29:00"
    # a late redelivery of an older slot neither moves the last slot back nor reports a gap
    assert fan_out(ctx, "plan", "r3", send, tick="2030-01-01T01:26:00") > 0
    assert fan_out(ctx, "plan", "r4", send, tick="2030-01-01T01:30:00") > 0
    assert len(ctx.r.hgetall(f"{ctx.prefix}:fanout-skipped:2030-01-01")) == 1


def test_skipped_slots_between_two_served_ones():
    from workers.fanout import skipped_slots

    assert skipped_slots(None, "2030-01-01T00:10:00", 60) == []
    assert skipped_slots("2030-01-01T00:09:00", "2030-01-01T00:10:00", 60) == []
    assert skipped_slots("2030-01-01T00:07:00", "2030-01-01T00:10:00", 60) == ["2030-01-01T00:08:00",
                                                                               "2030-01-01T00:09:00"]
    assert skipped_slots("2030-01-01T00:00:50", "2030-01-01T00:01:20", 10) == ["2030-01-01T00:01:00",
                                                                               "2030-01-01T00:01:10"]
