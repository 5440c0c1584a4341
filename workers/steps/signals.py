"""Step 1: read the deployment's live signals (simulated fleet, instances' /metrics or
Prometheus) and store them as ``<prefix>:signals:<deployment>`` for every other step."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from warmup.core import Instance, InstanceState
from workers import lead, metrics
from workers.context import Ctx
from workers import counting, drift
from workers.steps.outcome import DOC_ONLY, Outcome

log = logging.getLogger("warmcast.workers.signals")


@dataclass(frozen=True)
class SignalsOutcome(Outcome):
    source: str
    queue_depth: float
    ready: int | None
    provisioned: int | None
    doc: dict[str, Any] = field(metadata=DOC_ONLY)


def step(ctx: Ctx, deployment: str) -> SignalsOutcome:
    """Read the deployment's live signals and store them (``<prefix>:signals:<deployment>``)."""
    doc = ctx.sim(deployment).signals() if ctx.simulate else _read_live(ctx, deployment)
    rounds = doc.pop("rounds", None)
    if rounds is not None:   # a simulated fleet shows its instances' readings (run --simulate, replay --scrape-rounds)
        count_rounds(ctx, deployment, rounds)
    lead.observe(ctx, deployment, doc.get("instances", []), float(doc["ts"]))
    ctx.state.put("signals", deployment, doc, ttl_s=3600)
    for name in ("queue_depth", "ready", "provisioned"):
        metrics.SIGNAL.labels(deployment, name).set(value(doc, name, 0.0))
    drift.check(ctx, deployment, doc)
    return SignalsOutcome(deployment, str(doc.get("source", "sim")), value(doc, "queue_depth", 0.0),
                          doc.get("ready"), doc.get("provisioned"), doc)


def _read_live(ctx: Ctx, dep: str) -> dict[str, Any]:
    from workers.actuation import instance_urls
    from workers.live_signals import prometheus_live, scrape_live

    d = ctx.dep(dep)
    scaler = ctx.scaler(dep)
    urls = instance_urls(scaler.inner, d)
    read_state = ctx.r.pipeline(transaction=False)
    read_state.smembers(f"{ctx.prefix}:warmed:{dep}")
    read_state.smembers(f"{ctx.prefix}:warming:{dep}")
    # read after ``warming``: a run records its completed warmups before it leaves that set
    read_state.hgetall(f"{ctx.prefix}:warmup-done:{dep}")
    raw_warmed, raw_warming, raw_done = read_state.execute()
    warmed, warming = {m.decode() for m in raw_warmed}, {m.decode() for m in raw_warming}
    ours = {k.decode(): float(v) for k, v in raw_done.items()}
    token, prev = counting.load_carry(ctx, dep)   # the round before, whichever worker recorded it
    profile_of = getattr(scaler.inner, "profile_of", None)
    profiles = profile_of() if profile_of else None
    if d.signals.source == "prometheus":
        read = _primed(ctx, dep)
        doc, snap = prometheus_live(d, urls, prev, warmed, warming, profiles, warmup_done=ours, read=read)
    else:
        doc, snap = scrape_live(d, urls, prev, ctx.token(dep), warmed, warming, profiles=profiles, warmup_done=ours)
    launches = getattr(scaler.inner, "observe_launches", None)
    if launches is not None:  # Kubernetes: its own launches, seen ready by readyReplicas
        try:
            lead.record(ctx, dep, launches())
        except Exception as err:  # noqa: BLE001 - an API hiccup must not stop the scrape
            log.warning("%s: reading launch-to-ready from the scaler failed: %s", dep, err)
    launch_times = getattr(scaler.inner, "launch_times", None)
    launched = launch_times() if launch_times else {}
    for i in doc["instances"]:  # the launch time, where the scaler knows it: launch-to-ready from it
        i.setdefault("launched_at", launched.get(i["url"]))
    if not counting.record_round(ctx, dep, doc["arrivals"], doc.get("mix"), claim=(token, snap)):
        log.info("%s: another scrape recorded a round since this one's carry: this round is dropped, the "
                 "next counts the interval", dep)
    return doc


def count_rounds(ctx: Ctx, dep: str, rounds: list) -> None:
    """Count a simulated fleet's scrape rounds (``[(ts, {id: {finished, running, waiting}})]``, oldest
    first) as the live scrape counts its own: per instance between two of its readings, by the same
    code, recorded with the same claim on the round before."""
    from warmup.actuators.arrivals import InstanceReading, count
    from workers.live_signals import arrivals_doc, carried, snapshot

    token, prev = counting.load_carry(ctx, dep)
    for ts, readings in rounds:
        if prev is not None and ts <= float(prev["ts"]):
            continue   # read already
        counted = count(carried(prev), {i: InstanceReading(ts, r["finished"], r["running"], r["waiting"])
                                        for i, r in readings.items()})
        snap = snapshot(ts, counted)
        arr = arrivals_doc(counted, None if prev is None else float(prev["ts"]), ts)
        if counting.record_round(ctx, dep, arr, claim=(token, snap)):
            token, prev = repr(float(ts)), snap   # the carry it just recorded: no need to read it back
        else:
            token, prev = counting.load_carry(ctx, dep)


PRIMED_S = 5.0   # a shard's reading is this deployment's only within this long (a scrape round is 10 s)


def prime(ctx: Ctx, deployments: list[str]) -> int:
    """Before a shard scrapes its deployments one by one: those read from Prometheus by a
    ``label="value"`` selector are read together, three queries per server and label (issue 44);
    each one's step then takes its part.  Returns the queries sent."""
    from workers.live_signals import read_shard

    if ctx.simulate:
        return 0
    got, sent = read_shard([ctx.dep(d) for d in deployments])
    now = time.monotonic()
    for dep, read in got.items():
        ctx.cache[("prom-read", dep)] = (now, read)
    return sent


def _primed(ctx: Ctx, dep: str) -> tuple | None:
    """This round's shard reading of ``dep``, once (a stale one is dropped: the step reads afresh)."""
    hit = ctx.cache.pop(("prom-read", dep), None)
    return hit[1] if hit is not None and time.monotonic() - hit[0] < PRIMED_S else None


def latest(ctx: Ctx, dep: str, now: float | None = None) -> dict[str, Any]:
    """The stored signals, read again first when older than ``signals_max_age_s`` at ``now`` (the
    tick's clock, epoch seconds; the wall clock when not given)."""
    doc = ctx.state.get("signals", dep)
    now = time.time() if now is None else now
    if doc is None or now - float(doc.get("ts", 0)) > ctx.options.signals_max_age_s:
        doc = step(ctx, dep).doc
    return doc


def value(doc: dict[str, Any], key: str, default: float = math.nan) -> float:
    """A number of the signals document (``default`` when absent or not a number)."""
    try:
        return float(doc.get(key))
    except (TypeError, ValueError):
        return default


def instances_of(doc: dict[str, Any]) -> tuple[Instance, ...]:
    """The core's view of the instances in a signals document."""
    out = []
    for i in doc.get("instances", []):
        launched = i.get("launched_at")
        out.append(Instance(id=str(i["id"]), state=InstanceState(i["state"]), profile=i.get("profile") or "",
                            load_rpm=float(i.get("load_rpm") or 0.0), warmed=bool(i.get("warmed")),
                            launched_at=datetime.fromtimestamp(launched, timezone.utc) if launched else None))
    return tuple(out)
