"""The planner's lead from measured cold starts.

Every launch the loop sees (an instance first seen booting, then ready) records its launch-to-ready
seconds.  The lead is the P90 of the recent ones; without any, the stored ``warmcast
measure-coldstart`` record; without that, the deployments file's ``cold_start_min``.  The worker
resolves it and hands it to the core in its configuration (the core stays pure); the plan and its
audit entry say which value was used and where it came from.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workers.context import Ctx

RECENT = 20  # launches the P90 is taken over
QUANTILE = 0.9


@dataclass(frozen=True)
class Lead:
    cold_start_min: float
    source: str  # measured launches | measure-coldstart record | deployments file
    detail: str

    def as_doc(self) -> dict[str, Any]:
        return {"cold_start_min": round(self.cold_start_min, 3), "source": self.source, "detail": self.detail}


def choose(recent_s: list[float], record_min: float | None, yaml_min: float) -> Lead:
    """The lead from what is known, best first (pure)."""
    if recent_s:
        p90 = float(np.quantile(np.asarray(recent_s, float), QUANTILE))
        return Lead(p90 / 60.0, "measured launches", f"P90 of the last {len(recent_s)} launch-to-ready times")
    if record_min is not None:
        return Lead(record_min, "measure-coldstart record", "stored by `warmcast measure-coldstart`")
    return Lead(yaml_min, "deployments file", "cold_start_min of the deployment")


def resolve(ctx: Ctx, dep: str) -> Lead:
    from warmup.actuators.coldstart import load_coldstart

    recent = [float(v) for v in ctx.r.lrange(_key(ctx, "launch-ready", dep), 0, RECENT - 1)]
    record = load_coldstart(ctx.r, ctx.prefix, dep)
    return choose(recent, None if record is None else record.cold_start_min, ctx.dep(dep).cold_start_min)


def with_lead(ctx: Ctx, dep: str, cfg: Any) -> tuple[Any, Lead]:
    """``cfg`` (the core's configuration) with the resolved lead as its cold start."""
    lead = resolve(ctx, dep)
    return replace(cfg, scaling=replace(cfg.scaling, cold_start_min=lead.cold_start_min)), lead


def observe(ctx: Ctx, dep: str, instances: list[dict[str, Any]], now: float | None = None) -> list[float]:
    """Record launch-to-ready of the instances seen booting that are ready now; returns them.

    An instance counts only when the loop saw it booting (one already ready when first seen was
    launched before anyone watched), from its ``launched_at`` (the scaler's launch time) or, where
    the scaler does not say, from when it was first seen booting."""
    now = time.time() if now is None else now
    booting_key, ready_key = _key(ctx, "booting", dep), _key(ctx, "seen-ready", dep)
    booting = {k.decode(): float(v) for k, v in ctx.r.hgetall(booting_key).items()}
    done = []
    for i in instances:
        iid = str(i["id"])
        if i.get("state") == "booting":
            if iid not in booting and not ctx.r.sismember(ready_key, iid):
                ctx.r.hset(booting_key, iid, repr(float(i.get("launched_at") or now)))
            continue
        ctx.r.sadd(ready_key, iid)
        if iid in booting:
            done.append(max(0.0, now - booting[iid]))
            ctx.r.hdel(booting_key, iid)
    ids = {str(i["id"]) for i in instances}  # a URL reused by a later launch is a new launch
    for gone in {m.decode() for m in ctx.r.smembers(ready_key)} - ids:
        ctx.r.srem(ready_key, gone)
    for gone in set(booting) - ids:
        ctx.r.hdel(booting_key, gone)
    record(ctx, dep, done)
    return done


def record(ctx: Ctx, dep: str, seconds: list[float]) -> None:
    """Keep launch-to-ready times (the newest ``RECENT``): the loop's own or a scaler's (Kubernetes
    records its launches and sees them ready by ``status.readyReplicas``)."""
    for s in seconds:
        ctx.r.lpush(_key(ctx, "launch-ready", dep), repr(float(s)))
    if seconds:
        ctx.r.ltrim(_key(ctx, "launch-ready", dep), 0, RECENT - 1)


def _key(ctx: Ctx, what: str, dep: str) -> str:
    return f"{ctx.prefix}:{what}:{dep}"
