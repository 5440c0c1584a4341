"""Nothing lost in silence (issue 44): loop tasks that never ran are counted and, for the tick, audited.

Celery drops a task unrun when it waited in the queue past its ``expires`` (a scrape after 9 s, a
tick after 54 s: a backed-up queue, a paused or dead worker), when it was revoked, and when the
worker rejects its message (invalid, or a task name it does not know: an older worker beside a newer
beat).  A shard's task (:mod:`workers.shardrun`) also drops the deployments it reaches after its
slot's expiry ("late").  Each drop is counted in ``warmcast_dropped_tasks_total{kind, why, shard}``
and in a per-day Redis ledger (``P:dropped:DAY``, field ``kind|slot|why``: the deployments whose run
of that slot was lost), and every deployment whose tick was lost gets an audit entry of kind
``skipped``, the wording the fan-out uses for slots the beat never fired (:func:`audit_skipped`).
A lost tick is not run late: the next tick decides from fresh signals.
"""
from __future__ import annotations

import ast
import json
import logging
import re
from typing import Any

from warmcast.state import StateStore
from workers import metrics
from workers.context import Ctx
from workers.schedule import PERIODIC
from workers.shards import members, shard_label

log = logging.getLogger("warmcast.workers.dropped")

FANOUT, SHARD = "warmcast.fanout", "warmcast.shard"
_KIND_OF = {**{task: kind for kind, (_, task) in PERIODIC.items()}, "warmcast.retrain": "retrain"}
LEDGER_TTL_S = 2 * 86400
SEEN_TTL_S = 3600        # a redelivery comes back after the visibility timeout (300 s), well within this
AUDIT_LOOKBACK = 200     # audit entries read back to tell whether a slot older than the journal's ran
PIPELINE_BATCH = 1000    # commands per round trip when a whole shard's ticks are audited
NOT_RUN_LATE = "not run late, because the next tick decides from fresh signals"
WHY = {
    "expired": "its task waited in the queue past its expiry{expires} (the workers were busy, paused or down)",
    "revoked": "its task was revoked before it ran",
    "terminated": "its task was terminated while it ran",
    "rejected": "the worker rejected its message as invalid (see the worker's log)",
    "unknown": "the worker does not know its task name (a worker older than the beat that sent it?)",
    "late": "its shard's task reached this deployment after the slot's expiry (the shard took longer than "
            "the interval)",
    "superseded": "a newer tick had decided before this slot's run reached the deployment (its queue or "
                  "shard was behind)",
}


def kwargs_of(request: Any) -> dict[str, Any]:
    """A dropped task's keyword arguments from its Celery request context.  A revoked task's context
    carries only their repr (``kwargsrepr``, cut at 1024 characters): a long ``only`` list of a shard
    retry may be cut, and then the shard's names stand in (its deployments that ran are not audited)."""
    kw = getattr(request, "kwargs", None)
    if isinstance(kw, dict):
        return kw
    text = str(getattr(request, "kwargsrepr", "") or "")
    try:
        value = ast.literal_eval(text)
        return value if isinstance(value, dict) else {}
    except (ValueError, SyntaxError):
        found = re.findall(r"'(kind|shard|shards|tick|deployment)': ('[^']*'|\d+)", text)
        return {k: ast.literal_eval(v) for k, v in found}


def task_kind(name: str, kwargs: dict[str, Any]) -> str:
    """The schedule kind a task serves (``plan``, ``scrape``...): the fan-out and shard tasks carry it."""
    if name in (FANOUT, SHARD):
        return str(kwargs.get("kind") or "?")
    return _KIND_OF.get(name, name)


def deployments_of(ctx: Ctx, name: str, kwargs: dict[str, Any]) -> list[str]:
    """The deployments a dropped task would have served (none for a task of no deployment)."""
    if kwargs.get("deployment"):
        return [str(kwargs["deployment"])]
    if name == SHARD:
        if kwargs.get("only"):   # a retry of the deployments that failed transiently
            return [str(d) for d in kwargs["only"]]
        if "shard" not in kwargs or "shards" not in kwargs:
            return []
        return [d.name for d in members(ctx.deployments(), int(kwargs["shard"]), int(kwargs["shards"]))]
    if name == FANOUT:
        return [d.name for d in ctx.deployments()]
    return []


def _label(ctx: Ctx, name: str, kwargs: dict[str, Any]) -> str:
    if name == SHARD:
        return str(kwargs.get("shard", "?"))
    if kwargs.get("deployment"):
        return shard_label(str(kwargs["deployment"]), ctx.options.shards)
    return "all" if name == FANOUT else "-"


def reason(why: str, expires: str = "") -> str:
    """The audit's reason for a tick lost this way (``expires``: when its message expired, if known)."""
    text = WHY.get(why, f"its task was dropped ({why})").format(expires=f" ({expires})" if expires else "")
    return f"no tick ran in this slot: {text}; {NOT_RUN_LATE}"


def note(ctx: Ctx, name: str, kwargs: dict[str, Any], why: str, expires: str = "", task_id: str = "") -> int:
    """Count task ``name`` (its ``kwargs``) dropped for ``why``, ledger it, and audit each of its
    deployments whose tick it was and that no run of that slot served; returns how many were audited.
    A message dropped again (``task_id`` seen: a redelivery) is not counted twice."""
    if task_id and not ctx.r.set(f"{ctx.prefix}:dropped-task:{task_id}", why, nx=True, ex=SEEN_TTL_S):
        log.info("task %s (%s) dropped again (%s): counted when it was first dropped", task_id, name, why)
        return 0
    kind, tick = task_kind(name, kwargs), str(kwargs.get("tick") or "")
    deps = deployments_of(ctx, name, kwargs)
    metrics.DROPPED.labels(kind, why, _label(ctx, name, kwargs)).inc()
    ledger = f"{ctx.prefix}:dropped:{(tick or 'unknown')[:10]}"
    pipe = ctx.r.pipeline(transaction=False)
    pipe.hincrby(ledger, f"{kind}|{tick}|{why}", max(1, len(deps)))
    pipe.expire(ledger, LEDGER_TTL_S)
    if name == FANOUT and tick:  # the next fan-out finds the gap and audits it with this cause
        pipe.hset(f"{ctx.prefix}:fanout-dropped:{tick[:10]}", f"{kind}|{tick}", why)
        pipe.expire(f"{ctx.prefix}:fanout-dropped:{tick[:10]}", LEDGER_TTL_S)
    pipe.execute()
    log.warning("%s task %s of slot %s dropped unrun (%s%s): %d deployment(s)", kind, name, tick or "?", why,
                f", expired at {expires}" if expires else "", len(deps),
                extra={"event": {"task": name, "kind": kind, "tick": tick, "why": why, "deployments": len(deps)}})
    if kind != "plan" or not tick or name == FANOUT:
        return 0
    lost = unticked(ctx, deps, tick)
    audit_skipped(ctx, lost, tick, reason(why, expires), "superseded by the next tick", {"tick": tick, "why": why})
    return len(lost)


def unticked(ctx: Ctx, deps: list[str], slot: str) -> list[str]:
    """The deployments of ``deps`` for which no run of tick ``slot`` decided, nor was its loss audited.

    The plan journal answers for most: older than ``slot`` (or none), the slot did not run; the slot
    itself, it did.  Newer (a redelivery found after later ticks ran) needs the audit stream.  A
    deployment whose plan lease is held is left out: a run (a copy of this one) is deciding now."""
    st = StateStore(ctx.r, ctx.prefix)
    out: list[str] = []
    for i in range(0, len(deps), PIPELINE_BATCH):
        batch = deps[i:i + PIPELINE_BATCH]
        pipe = ctx.r.pipeline(transaction=False)
        for d in batch:
            pipe.get(st.key("plan-journal", d))
            pipe.exists(st.key("lock", "plan", d))
        got = pipe.execute()
        for d, raw, running in zip(batch, got[0::2], got[1::2]):
            last = json.loads(raw)["tick"] if raw else ""
            if not running and (last < slot or (last > slot and not _audited(ctx, d, slot))):
                out.append(d)
    return out


def _audited(ctx: Ctx, dep: str, slot: str) -> bool:
    """Whether the recent audit of ``dep`` has a decision (or a recorded loss) of tick ``slot``."""
    for _, f in ctx.r.xrevrange(StateStore(ctx.r, ctx.prefix).key("audit", dep), count=AUDIT_LOOKBACK):
        kind = f.get(b"kind", b"").decode()
        if kind in ("scale", "skipped") and json.loads(f.get(b"inputs", b"{}")).get("tick") == slot:
            return True
    return False


def audit_skipped(ctx: Ctx, deps: list[str], slot: str, why: str, outcome: str, inputs: dict[str, Any]) -> None:
    """One ``skipped`` audit entry per deployment for tick ``slot``: the one wording of a lost tick
    (the fan-out's slots the beat never fired, tasks dropped unrun), pipelined in batches."""
    for i in range(0, len(deps), PIPELINE_BATCH):
        pipe = ctx.r.pipeline(transaction=False)
        st = StateStore(pipe, ctx.prefix)
        for d in deps[i:i + PIPELINE_BATCH]:
            st.audit(d, "skipped", f"tick {slot} skipped", why, False, outcome=outcome, inputs=inputs)
        pipe.execute()
