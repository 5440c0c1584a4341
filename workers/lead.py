"""The planner's lead from measured cold starts.

Every launch the loop sees (an instance first seen booting, then ready) records its launch-to-ready
seconds.  The lead is the P90 of the recent ones; without any, the stored ``warmcast
measure-coldstart`` record; without that, the deployments file's ``cold_start_min``
(``warmup.core.lead.choose``, read by ``warmup.actuators.coldstart.resolve_lead``, which the API's
plans and KEDA answers call too).  The worker hands it to the core in its configuration (the core
stays pure); the plan and its audit entry say which value was used and where it came from.
"""
from __future__ import annotations

import time
from typing import Any

from warmup.actuators.coldstart import launch_ready_key, resolve_lead
from warmup.core import lead as core_lead
from warmup.core.lead import QUANTILE, RECENT, Lead, choose  # noqa: F401 - the rule lives in the core
from workers.context import Ctx


def resolve(ctx: Ctx, dep: str) -> Lead:
    """The lead for ``dep`` by the rule the API and the what-if use too (one resolver); inside a
    tick, the one its view resolved."""
    pinned = ctx.pinned_view(dep)
    return pinned.lead if pinned is not None else resolve_lead(ctx.r, ctx.prefix, ctx.dep(dep))


def with_lead(ctx: Ctx, dep: str, cfg: Any) -> tuple[Any, Lead]:
    """``cfg`` (the core's configuration) with the resolved lead as its cold start."""
    lead = resolve(ctx, dep)
    return core_lead.with_lead(cfg, lead), lead


def observe(ctx: Ctx, dep: str, instances: list[dict[str, Any]], now: float | None = None) -> list[float]:
    """Record launch-to-ready of the instances seen booting that are ready now; returns them.

    An instance counts only when the loop saw it booting (one already ready when first seen was
    launched before anyone watched), from its ``launched_at`` (the scaler's launch time) or, where
    the scaler does not say, from when it was first seen booting.  One round trip reads what was
    seen, one writes what changed: a command per instance and scrape was most of a scrape's Redis
    traffic (issue 44)."""
    now = time.time() if now is None else now
    booting_key, ready_key = _key(ctx, "booting", dep), _key(ctx, "seen-ready", dep)
    read = ctx.r.pipeline(transaction=False)
    read.hgetall(booting_key)
    read.smembers(ready_key)
    raw_booting, raw_ready = read.execute()
    booting = {k.decode(): float(v) for k, v in raw_booting.items()}
    ready = {m.decode() for m in raw_ready}
    write, done = ctx.r.pipeline(transaction=False), []
    for i in instances:
        iid = str(i["id"])
        if i.get("state") == "booting":
            if iid not in booting and iid not in ready:
                write.hset(booting_key, iid, repr(float(i.get("launched_at") or now)))
            continue
        if iid not in ready:
            write.sadd(ready_key, iid)
        if iid in booting:
            done.append(max(0.0, now - booting[iid]))
            write.hdel(booting_key, iid)
    ids = {str(i["id"]) for i in instances}  # a URL reused by a later launch is a new launch
    if ready - ids:
        write.srem(ready_key, *sorted(ready - ids))
    if set(booting) - ids:
        write.hdel(booting_key, *sorted(set(booting) - ids))
    _record(write, launch_ready_key(ctx.prefix, dep), done)
    if len(write):
        write.execute()
    return done


def record(ctx: Ctx, dep: str, seconds: list[float]) -> None:
    """Keep launch-to-ready times (the newest ``RECENT``): the loop's own or a scaler's (Kubernetes
    records its launches and sees them ready by ``status.readyReplicas``)."""
    pipe = ctx.r.pipeline(transaction=False)
    _record(pipe, launch_ready_key(ctx.prefix, dep), seconds)
    if len(pipe):
        pipe.execute()


def _record(pipe: Any, key: str, seconds: list[float]) -> None:
    for s in seconds:
        pipe.lpush(key, repr(float(s)))
    if seconds:
        pipe.ltrim(key, 0, RECENT - 1)


def _key(ctx: Ctx, what: str, dep: str) -> str:
    return f"{ctx.prefix}:{what}:{dep}"
