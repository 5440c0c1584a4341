"""The fan-out: one periodic ``kind`` becomes one task per deployment, at most once per slot.

Beat sends ``warmcast.fanout(kind)``; :func:`fan_out` claims the schedule slot, counts the run
in Redis ledgers and, for the first claim only, sends one task per deployment tagged with the
slot.  Celery is not imported here: the task passes its app's ``send_task`` in, so the slot
and ledger logic can be read (and called) without a worker.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from workers.context import Ctx
from workers.schedule import PERIODIC, claim_slot, every, expires_for, tick_id

# The task's logger name, kept so operators' log filters still match after the move.
log = logging.getLogger("warmcast.workers.tasks")

LEDGER_TTL_S = 2 * 86400


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


def fan_out(ctx: Ctx, kind: str, run_id: str, send_task: Callable[..., Any]) -> int:
    """Send one ``kind`` task per deployment, tagged with the schedule slot; the number sent
    (0 when another fan-out already claimed the slot)."""
    name = "warmcast.retrain" if kind == "retrain" else PERIODIC[kind][1]
    opts = ctx.options
    tick = tick_id(every(opts, kind))
    exp = 3 * 3600 if kind == "retrain" else expires_for(opts, kind)
    first = claim_slot(ctx.r, ctx.prefix, kind, tick, every(opts, kind), run_id)
    _count_run(ctx, kind, tick, first)
    if not first:
        log.warning("fan-out %s for slot %s already sent: this one sends nothing", kind, tick)
        return 0
    deps = ctx.deployments()
    for d in deps:
        send_task(name, kwargs={"deployment": d.name, "tick": tick}, expires=exp, queue=opts.queue)
    return len(deps)
