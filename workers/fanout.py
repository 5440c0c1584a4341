"""The fan-out: one periodic ``kind`` becomes one task per deployment, at most once per slot.

Beat sends ``warmcast.fanout(kind, tick)`` with the slot it fired for; :func:`fan_out` claims the
slot, counts the run in Redis ledgers and, for the first claim only, sends one task per deployment
tagged with the slot (with ``WARMCAST_WORKERS_SHARDS`` set, one ``warmcast.shard`` task per shard
instead: workers/shards.py).  Slots that no fan-out served (the beat stalled or down across a boundary)
are found here, counted and, for the tick, audited per deployment with the reason: no minute is
silently missing (issue 41).  Celery is not imported here: the task passes its app's ``send_task``
in, so the slot and ledger logic can be read (and called) without a worker.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Callable

from workers import metrics
from workers.context import Ctx
from workers.dropped import SHARD as SHARD_TASK
from workers.dropped import audit_skipped
from workers.schedule import PERIODIC, claim_slot, every, expires_for, tick_id
from workers.shardrun import RUNNERS
from workers.shards import shard_of

# The task's logger name, kept so operators' log filters still match after the move.
log = logging.getLogger("warmcast.workers.tasks")

LEDGER_TTL_S = 2 * 86400
FLEET_TASK = "warmcast.fleet"   # workers/steps/fleet.py: node pools' warm GPUs (issue 45)
FLEET_AFTER = 0.5               # share of the plan interval the fleet tick waits for the deployments' ticks
SLOT = "%Y-%m-%dT%H:%M:%S"
AUDITED_GAP = 60  # at most this many skipped slots audited one by one; a longer gap is one entry
# Moves the last slot served forward only (a late redelivery of an older slot must not move it
# back); returns the one it replaced.
_ADVANCE = """
local cur = redis.call('get', KEYS[1])
if (not cur) or cur < ARGV[1] then redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return cur
"""


def _count_run(ctx: Ctx, kind: str, tick: str, first: bool) -> None:
    """Ledgers per schedule slot: fan-outs run (how the two-beats test and an operator see double
    firing) and fan-outs that sent (at most one per slot, by the claim)."""
    pipe = ctx.r.pipeline(transaction=False)
    for ledger, counted in ((f"{ctx.prefix}:fanout-runs:{tick[:10]}", True),
                            (f"{ctx.prefix}:fanout-sent:{tick[:10]}", first)):
        if counted:
            pipe.hincrby(ledger, f"{kind}|{tick}", 1)
            pipe.expire(ledger, LEDGER_TTL_S)
    pipe.hincrby(f"{ctx.prefix}:fanout-total", kind, 1)
    pipe.execute()


def skipped_slots(last: str | None, tick: str, every_s: float) -> list[str]:
    """The slots strictly between the last one served and ``tick`` (none before the first)."""
    if not last or last >= tick:
        return []
    t, end, step = datetime.strptime(last, SLOT), datetime.strptime(tick, SLOT), timedelta(seconds=every_s)
    out = []
    t += step
    while t < end:
        out.append(t.strftime(SLOT))
        t += step
    return out


def _note_skipped(ctx: Ctx, kind: str, tick: str, every_s: float) -> list[str]:
    """Record the slots of ``kind`` that no fan-out served before ``tick``: a ledger per day, the
    skipped-slots counter, and for the tick an audit entry per deployment saying why."""
    last = ctx.r.eval(_ADVANCE, 1, f"{ctx.prefix}:fanout-last:{kind}", tick, int(max(LEDGER_TTL_S, 4 * every_s)))
    gone = skipped_slots(last.decode() if isinstance(last, bytes) else last, tick, every_s)
    if not gone:
        return []
    pipe = ctx.r.pipeline(transaction=False)
    for slot in gone:
        ledger = f"{ctx.prefix}:fanout-skipped:{slot[:10]}"
        pipe.hset(ledger, f"{kind}|{slot}", tick)
        pipe.expire(ledger, LEDGER_TTL_S)
    pipe.execute()
    metrics.SKIPPED_SLOTS.labels(kind).inc(len(gone))
    log.warning("fan-out %s: %d slot(s) from %s to %s had no fan-out (the beat did not fire in them); "
                "slot %s serves what they would have", kind, len(gone), gone[0], gone[-1], tick)
    if kind == "plan":
        _audit_skipped_ticks(ctx, gone, tick)
    return gone


def _audit_skipped_ticks(ctx: Ctx, gone: list[str], tick: str) -> None:
    """A skipped tick is not run late: the tick of ``tick`` decides from fresh signals instead, so an
    older decision would only be superseded.  Each deployment's audit says so, and why: the beat did
    not fire, or the fan-out it sent was dropped unrun (workers/dropped.py ledgers that)."""
    slots = gone if len(gone) <= AUDITED_GAP else [f"{gone[0]}..{gone[-1]}"]
    deps = [d.name for d in ctx.deployments()]
    for slot in slots:
        cause = ctx.r.hget(f"{ctx.prefix}:fanout-dropped:{slot[:10]}", f"plan|{slot}") if ".." not in slot else None
        text = (f"its fan-out task was dropped unrun ({cause.decode()}: it waited in the queue past its expiry, "
                f"or a worker refused it)" if cause else
                "the beat did not fire in it (stalled, down or late past the boundary)")
        why = f"no tick ran in this slot: {text}; not run late, because tick {tick} decides from fresh signals"
        audit_skipped(ctx, deps, slot, why, f"superseded by tick {tick}",
                      {"tick": slot, "slots": len(gone) if len(slots) == 1 and len(gone) > 1 else 1})


def _send(ctx: Ctx, kind: str, name: str, tick: str, exp: float, send_task: Callable[..., Any]) -> int:
    """One task per deployment or, with shards, one per non-empty shard, for the kinds a shard runs
    (workers/shardrun.py's runners; the retrain stays per deployment: it is long and acknowledged
    when it starts, so a shard of them would be lost whole)."""
    opts = ctx.options
    deps = ctx.deployments()
    if opts.shards and kind in RUNNERS:
        used = sorted({shard_of(d.name, opts.shards) for d in deps})
        for s in used:
            send_task(SHARD_TASK, kwargs={"kind": kind, "shard": s, "shards": opts.shards, "tick": tick},
                      expires=exp, queue=opts.queue)
        return len(used)
    for d in deps:
        send_task(name, kwargs={"deployment": d.name, "tick": tick}, expires=exp, queue=opts.queue)
    return len(deps)


def fan_out(ctx: Ctx, kind: str, run_id: str, send_task: Callable[..., Any], tick: str = "") -> int:
    """Send one ``kind`` task per deployment (or per shard, with ``shards`` set), tagged with the
    schedule slot (``tick``: the slot the beat fired for; empty: the slot of the worker's clock, for a
    run sent by hand); the number of tasks sent (0 when another fan-out already claimed the slot)."""
    name = "warmcast.retrain" if kind == "retrain" else PERIODIC[kind][1]
    opts = ctx.options
    tick = tick or tick_id(every(opts, kind))
    exp = 3 * 3600 if kind == "retrain" else expires_for(opts, kind)
    first = claim_slot(ctx.r, ctx.prefix, kind, tick, every(opts, kind), run_id)
    _count_run(ctx, kind, tick, first)
    if not first:
        log.warning("fan-out %s for slot %s already sent: this one sends nothing", kind, tick)
        return 0
    if kind != "retrain":
        _note_skipped(ctx, kind, tick, every(opts, kind))
    sent = _send(ctx, kind, name, tick, exp, send_task)
    if kind == "plan" and ctx.node_pools():
        # the fleet tick sizes each node pool from what the deployments' ticks of this slot just decided
        send_task(FLEET_TASK, kwargs={"tick": tick}, countdown=FLEET_AFTER * every(opts, kind), expires=exp,
                  queue=opts.queue)
    return sent
