"""One schedule kind's step for one deployment (:data:`RUNNERS`), and for a whole shard (:func:`run_shard`).

The per-deployment tasks (``warmcast.scrape``, ``warmcast.plan``...) and the shard task
(``warmcast.shard``) run the very same function per deployment, so a shard changes how work is
carried, never what a deployment's tick does: the plan runner is ``workers/steps/tick.py``'s
``step``, with its lease, journal and audit.  The shard task's id is each tick's ``run_id`` (the
lease token): leases are per deployment, so one token across a shard's deployments is safe, and a
redelivered shard task takes over its own dead first attempt as a per-deployment task does.

A shard first primes what it can do for all its deployments at once (:data:`PRIMERS`: the fleet
model's batched forecast, Prometheus read once per server and label), then runs its deployments one
after another.  Later (issue 44): pipelined Redis reads across a shard (one round trip per step).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from workers import dropped, metrics
from workers.context import Ctx
from workers.schedule import PERIODIC, expires_for, tick_id
from workers.shards import members, shard_label
from workers.steps import alerts as alerts_step
from workers.steps import expire as expire_step
from workers.steps import forecast as forecast_step
from workers.steps import ingest as ingest_step
from workers.steps import signals as signals_step
from workers.steps import tick as tick_step
from workers.steps import warmup as warmup_step

log = logging.getLogger("warmcast.workers.shard")
SLOT = "%Y-%m-%dT%H:%M:%S"


def run_scrape(ctx: Ctx, deployment: str, tick: str = "", run_id: str = "",
               now: Optional[datetime] = None) -> dict[str, Any]:
    """A scrape, and the urgent warmup a queue over the lowest tier starts at once; ``now``: the
    clock when a replay drives the loop, else the wall's."""
    read = signals_step.step(ctx, deployment)
    out = read.as_dict()
    if warmup_step.urgent(ctx, deployment, read.doc):
        out["warmup"] = warmup_step.step(ctx, deployment, signals_doc=read.doc, now=now).as_dict()
    return out


def run_ingest(ctx: Ctx, deployment: str, tick: str = "", run_id: str = "") -> dict[str, Any]:
    return ingest_step.step(ctx, deployment).as_dict()


def run_forecast(ctx: Ctx, deployment: str, tick: str = "", run_id: str = "",
                 now: Optional[datetime] = None) -> dict[str, Any]:
    return forecast_step.step(ctx, deployment, now=now).as_dict()


def run_plan(ctx: Ctx, deployment: str, tick: str = "", run_id: str = "",
             now: Optional[datetime] = None) -> dict[str, Any]:
    """The one tick; ``now``: the tick's clock when a replay drives the loop (else the wall clock),
    and the slot comes from that clock when none is given."""
    slot = tick or tick_id(ctx.options.plan_every_s, now.timestamp() if now else None)
    out = tick_step.step(ctx, deployment, tick=slot, run_id=run_id, now=now).as_dict()
    if out["status"] == "stale":   # this slot never decided here: said in the audit, not left silent
        dropped.note(ctx, "warmcast.plan", {"deployment": deployment, "tick": slot}, "superseded")
    elif out["status"] == "applied" and now is None:   # live only: a replay's clock is not the wall's
        start = datetime.strptime(slot, SLOT).replace(tzinfo=timezone.utc).timestamp()
        metrics.TICK_DELAY.labels(shard_label(deployment, ctx.options.shards)).observe(time.time() - start)
    return out


def run_expire(ctx: Ctx, deployment: str, tick: str = "", run_id: str = "") -> dict[str, Any]:
    return expire_step.step(ctx, deployment).as_dict()


def run_alert_check(ctx: Ctx, deployment: str, tick: str = "", run_id: str = "") -> dict[str, Any]:
    return {"deployment": deployment, "escalated": [o.as_dict() for o in alerts_step.check(ctx, deployment)]}


class Meter:
    """Adds the running thread's CPU since its last call to a kind's counter.  A shard's task runs
    long (after a start, its forecast primer alone resolves every deployment's model, minutes of
    CPU): counted as it goes, a window that reads the counter sees its own part, not one lump."""

    def __init__(self, counter: Any) -> None:
        self.counter, self.mark = counter, time.thread_time()

    def __call__(self) -> None:
        now = time.thread_time()
        self.counter.inc(max(0.0, now - self.mark))
        self.mark = now


def prime_forecasts(ctx: Ctx, names: list[str], meter: Callable[[], None]) -> None:
    """The shard's deployments a shared model serves, forecast in one batched call per model before
    each one's step."""
    calls = forecast_step.prime(ctx, names, meter=meter)
    if calls:
        log.debug("forecast shard: %d batched call(s) for %d deployments", calls, len(names))


def prime_scrapes(ctx: Ctx, names: list[str], meter: Callable[[], None]) -> None:
    signals_step.prime(ctx, names)   # a few queries for the whole shard: counted when they are done


Runner = Callable[..., dict]
# work a shard does once for all its deployments before each one's step (a failure here is logged
# and each step then does its own work, as a per-deployment task would)
PRIMERS: dict[str, Callable[[Ctx, list[str], Callable[[], None]], Any]] = {"forecast": prime_forecasts,
                                                                           "scrape": prime_scrapes}
RUNNERS: dict[str, Runner] = {"scrape": run_scrape, "ingest": run_ingest, "forecast": run_forecast,
                              "plan": run_plan, "expire": run_expire, "alerts": run_alert_check}


@dataclass
class ShardResult:
    """What one shard task did: deployments run, failed (error named), to retry (transient), dropped late."""

    kind: str
    shard: int
    ran: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    transient: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "shard": self.shard, "ran": self.ran, "failed": self.failed,
                "transient": self.transient, "late": len(self.late)}


def deadline(ctx: Ctx, kind: str, tick: str) -> float | None:
    """When the slot's run stops being worth doing (its start plus the kind's expiry; None: no slot)."""
    if not tick:
        return None
    start = datetime.strptime(tick, SLOT).replace(tzinfo=timezone.utc).timestamp()
    return start + expires_for(ctx.options, kind)


def run_shard(ctx: Ctx, kind: str, shard: int, shards: int, tick: str, run_id: str,
              only: list[str] | None = None, transient: tuple[type[BaseException], ...] = ()) -> ShardResult:
    """Run ``kind``'s step for each deployment of ``shard`` (of ``shards``), or for ``only`` those (a
    retry).  A deployment's error is its own: counted, logged and the next one runs; ``transient``
    errors are collected for a retry of just those deployments.  Deployments reached after the slot's
    expiry are not run late: they are dropped, counted and, for the tick, audited (workers/dropped.py)."""
    if kind not in RUNNERS:
        raise ValueError(f"no shard runner for kind {kind!r}; known: {sorted(RUNNERS)}")
    names = list(only) if only else [d.name for d in members(ctx.deployments(), shard, shards)]
    out, until = ShardResult(kind, shard), deadline(ctx, kind, tick)
    meter = Meter(metrics.STEP_CPU.labels(kind))
    if kind in PRIMERS:
        try:
            PRIMERS[kind](ctx, names, meter)
        except Exception:  # noqa: BLE001 - an optimisation: each deployment's own step still runs
            log.warning("shard %d: %s primer failed; each deployment runs on its own", shard, kind, exc_info=True)
    for i, name in enumerate(names):
        meter()
        if until is not None and time.time() > until:
            out.late = names[i:]
            dropped.note(ctx, dropped.SHARD, {"kind": kind, "shard": shard, "shards": shards, "tick": tick,
                                              "only": out.late}, "late")
            break
        try:
            RUNNERS[kind](ctx, name, tick, run_id)
            out.ran += 1
        except transient:
            out.transient.append(name)
        except Exception as err:  # noqa: BLE001 - one deployment's failure must not stop its shard
            task = PERIODIC[kind][1]
            metrics.TASK_FAILURES.labels(task, type(err).__name__).inc()
            out.failed[name] = repr(err)[:300]
            log.error("shard %d: %s of %s failed", shard, kind, name, exc_info=True,
                      extra={"event": {"task": task, "deployment": name, "shard": shard, "error": repr(err)}})
    meter()
    return out
