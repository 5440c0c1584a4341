"""The live signals of a deployment's instances, read from their own ``/metrics`` (the vLLM
client) or from the deployment's Prometheus, as one signals document."""
from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from warmcast.config.deployments import Deployment
from warmcast.errors import InputError
from warmup.actuators import arrivals
from workers.mix import DEFAULT_LONG_TOKENS, round_mix

def _instance_state(waiting: float, running: float, max_seqs: int | None) -> str:
    if waiting > 0 or (max_seqs and running >= max_seqs):
        return "saturated"
    return "ready_busy" if running > 0 else "ready_idle"


@dataclass
class Reading:
    """One instance's live numbers (``waiting`` None: it did not answer; ``error`` says why)."""

    url: str
    waiting: float | None = None
    running: float = 0.0
    done: float = 0.0
    error: str = ""


def scrape_live(dep: Deployment, urls: list[str], prev: dict[str, Any] | None, token: str | None,
                warmed: set[str], warming: set[str] = frozenset(), timeout_s: float = 5.0,
                profiles: dict[str, str] | None = None,
                warmup_done: dict[str, float] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(signals document, snapshot to pass as ``prev`` next time) from every instance's /metrics."""
    from warmup.actuators.vllm_client import VLLMClient, fleet_metrics

    async def read_all():
        clients = [VLLMClient(u, token=token, timeout_s=timeout_s, retries=1) for u in urls]
        try:
            return await fleet_metrics(clients)
        finally:
            await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    sig = asyncio.run(read_all()) if urls else None
    readings = [Reading(r.instance, error=r.error or "") if r.value is None else
                Reading(r.instance, r.value.waiting, r.value.running, r.value.counter("vllm:request_success_total"))
                for r in (sig.instances if sig else [])]
    p99 = sig.ttft_quantile(0.99) if sig is not None else None
    prompts = {r.instance: None if r.value is None else r.value.prompt_tokens for r in (sig.instances if sig else [])}
    doc, snap = signals_doc(dep, readings, p99, prev, warmed, warming, profiles, "scrape", warmup_done, prompts)
    doc["p99_by_profile"] = p99_by_profile(sig, profiles or {})
    return doc, snap


def p99_by_profile(sig: Any, profiles: dict[str, str]) -> dict[str, float]:
    """Each profile's own TTFT P99 (its instances' histograms merged), where the scaler names the
    profile of some instance and they have observations: the switch breaker watches a canary by
    its own replicas.  (The Prometheus source gives the fleet's P99 only.)"""
    out: dict[str, float] = {}
    for name in sorted(set(profiles.values()) - {""}) if sig is not None else ():
        v = sig.ttft_quantile(0.99, only={u for u, p in profiles.items() if p == name})
        if v is not None:
            out[name] = v
    return out


def prometheus_live(dep: Deployment, urls: list[str], prev: dict[str, Any] | None, warmed: set[str],
                    warming: set[str] = frozenset(), profiles: dict[str, str] | None = None,
                    token: str | None = None, warmup_done: dict[str, float] | None = None,
                    read: tuple | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same document from the deployment's Prometheus (``signals: {source: prometheus}``):
    per-target gauges and counters by the ``instance`` label, P99 TTFT over the last minute.
    Instances the scaler knows that Prometheus has not scraped yet count as booting.  ``read``: its
    three answers when a shard read them for all its deployments at once (:func:`read_shard`)."""
    from warmup.actuators.prometheus import PrometheusSignals

    spec = dep.signals
    if not spec.prometheus_url:
        raise InputError(f"deployment {dep.name}: signals.source is prometheus but signals.prometheus_url is unset")

    async def query():
        async with PrometheusSignals(spec.prometheus_url, spec.selector, token=token) as p:
            return await asyncio.gather(p.per_instance(), p.ttft_quantile(0.99), p.prompt_histograms())

    per, p99, by_inst = read if read is not None else asyncio.run(query())
    readings = [Reading(f"http://{inst}", v.get("waiting", 0.0), v.get("running", 0.0), v.get("success", 0.0))
                for inst, v in sorted(per.items())]
    seen = {r.url for r in readings}
    readings += [Reading(u, error="not scraped by Prometheus yet") for u in urls if u not in seen]
    prompts = {f"http://{inst}": h for inst, h in by_inst.items()}
    return signals_doc(dep, readings, p99, prev, warmed, warming, profiles, "prometheus", warmup_done, prompts)


def read_shard(deps: list[Deployment]) -> tuple[dict[str, tuple], int]:
    """(deployment -> its three Prometheus answers, queries sent) for the deployments whose selector
    is one ``label="value"`` matcher, grouped by server and label: three queries a group, not three a
    deployment (issue 44).  The others are left to their own step."""
    from warmup.actuators.prometheus import ShardPrometheus, equality_matcher

    groups: dict[tuple[str, str], dict[str, str]] = {}
    for d in deps:
        m = equality_matcher(d.signals.selector) if d.signals.source == "prometheus" else None
        if m is not None and d.signals.prometheus_url:
            groups.setdefault((d.signals.prometheus_url, m[0]), {})[m[1]] = d.name

    async def one(url: str, label: str, names: dict[str, str]) -> tuple[dict[str, tuple], int]:
        async with ShardPrometheus(url, label, sorted(names)) as p:
            got = await p.read_all()
            return {names[v]: r for v, r in got.items()}, p.sent

    async def every() -> list:
        return await asyncio.gather(*(one(u, lab, names) for (u, lab), names in groups.items()))

    out, sent = {}, 0
    for got, n in asyncio.run(every()) if groups else ():
        out.update(got)
        sent += n
    return out, sent


def signals_doc(dep: Deployment, readings: list[Reading], p99: float | None, prev: dict[str, Any] | None,
                warmed: set[str], warming: set[str], profiles: dict[str, str] | None,
                source: str, warmup_done: dict[str, float] | None = None,
                prompts: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(signals document, snapshot for the next call) from the instances' readings.

    Arrivals are counted per instance (``warmup.actuators.arrivals``): reset-aware, queued requests counted
    when they arrive, the warmup requests warmcast completed on each taken out (``warmup_done``:
    cumulative per URL), instances leaving or failing a scrape neither a drop nor, when back, a
    spike.  ``doc["arrivals"]`` has them per minute with the round's coverage.  ``profiles`` names the profile each URL runs,
    where the scaler knows it (the switch machine counts on it).  ``prompts``: each instance's
    cumulative prompt-token histogram; ``doc["mix"]`` has the round's long and all prompts (``workers.mix``).
    """
    profiles = profiles or {}

    def max_seqs(url: str) -> int | None:
        prof = dep.profiles.get(profiles.get(url) or dep.default_profile) or dep.profiles[dep.default_profile]
        v = prof.engine_args.get("max-num-seqs")
        return int(v) if v else None

    now = time.time()
    ours = warmup_done or {}
    current = {r.url: None if r.waiting is None else
               arrivals.InstanceReading(now, r.done, r.running, r.waiting, float(ours.get(r.url, 0.0)))
               for r in readings}
    counted = arrivals.count(carried(prev), current, warming)
    rate = {s.instance: s.arrivals * 60.0 / (s.end - s.start) for s in counted.spans
            if s.start is not None and s.end > s.start}
    insts = []
    for r in readings:
        base = {"id": r.url, "url": r.url, "warmed": r.url in warmed, "profile": profiles.get(r.url, "")}
        if r.waiting is None:
            insts.append({**base, "state": "booting", "load_rpm": 0.0, "error": r.error})
            continue
        insts.append({**base, "state": _instance_state(r.waiting, r.running, max_seqs(r.url)),
                      "load_rpm": rate.get(r.url, 0.0), "waiting": r.waiting, "running": r.running})
    answered = [r for r in readings if r.waiting is not None]
    doc = {"ts": now, "source": source, "queue_depth": sum(r.waiting for r in answered),
           "running": sum(r.running for r in answered),
           "observed_rpm": sum(rate.values()) if prev else float("nan"), "p99_s": p99,
           "instances": insts, "ready": len(answered), "provisioned": len(insts),
           "errors": {r.url: r.error for r in readings if r.error}, "requests_total": sum(r.done for r in answered),
           "arrivals": arrivals_doc(counted, None if prev is None else float(prev["ts"]), now)}
    mix_cfg = dep.schedule.mix_trigger
    doc["mix"], prompt_carry = round_mix((prev or {}).get("prompts"), prompts or {},
                                         mix_cfg.long_tokens if mix_cfg else DEFAULT_LONG_TOKENS, now)
    return doc, snapshot(now, counted, prompts=prompt_carry)


def carried(prev: dict[str, Any] | None) -> dict[str, arrivals.InstanceReading] | None:
    """The readings of the round before, from its snapshot (None: a first round)."""
    return None if prev is None else {u: arrivals.InstanceReading(**v) for u, v in prev.get("carry", {}).items()}


def snapshot(now: float, counted: arrivals.Count, **extra: Any) -> dict[str, Any]:
    """What the next round counts from: this round's instant and its readings (and ``extra``)."""
    return {"ts": now, "carry": {u: asdict(v) for u, v in counted.carry.items()}, **extra}


def arrivals_doc(counted: arrivals.Count, prev_ts: float | None, now: float) -> dict[str, Any]:
    """What the signals step records for ingest: arrivals spread over the minutes they cover, the
    round's coverage, and from when held instances may still add arrivals."""
    return {"by_minute": {str(m): v for m, v in arrivals.by_minute(counted.spans, prev_ts or now).items()},
            "minute": int(now // 60), "until": now, "expected": counted.expected, "missed": counted.missed,
            "coverage": counted.coverage, "held_since": counted.held_since, "uncounted": dict(counted.uncounted)}
