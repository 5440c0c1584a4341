"""Run a calibration against one server: probe, search per scenario, burst step.

The decisions (which rate next, pass or fail, when the burst recovered) are the pure
functions of :mod:`warmup.calibration.search`; this module only sequences load steps
through the load engine (:class:`LoadEngine`: ``vllm bench serve`` in
:mod:`warmup.calibration.benchserve`, or GuideLLM in
:mod:`warmup.calibration.guidellm`) and collects what they measured into the calibration
document (see :mod:`warmup.calibration.report` for its files).
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Protocol

import numpy as np

from warmcast.errors import WarmcastError
from warmcast.config.slo import SLO
from warmup.actuators.vllm_client import InstanceError, VLLMClient
from warmup.core.stats import quantile
from warmup.calibration.evidence import assess, requests_to_resolve
from warmup.calibration.search import (BURST_FACTOR, RateEvidence, Scenario, SearchConfig, SearchStep, StepStats,
                                       judge, next_step, recovery_time_s, scaled_rates, scaled_scenarios, window_p99s)
from warmup.calibration import report
from warmup.calibration.steps import Arrival, Record, first_errors, schedule, step_stats

Progress = Callable[[str], None]


class LoadEngine(Protocol):
    """What sends a step's requests and measures them (the field's load generator)."""

    name: str

    async def send(self, arrivals: list[Arrival], *, drain_s: float, seed: int = 0) -> list[Record]: ...

    async def probe(self, scenario: Scenario, *, concurrency: int, duration_s: float, seed: int = 0) -> float: ...


class CalibrationError(WarmcastError):
    """The calibration has no answer (the server serves nothing, or no rate meets the SLO)."""


@dataclass(frozen=True)
class CalibrationPlan:
    scenarios: tuple[str, ...] = ("short", "medium", "long", "mix")
    headline: Optional[str] = None      # the scenario whose capacity is stored (default: mix, else the first)
    warmup_s: float = 5.0               # each step's unmeasured warm-up
    step_s: float = 15.0                # each step's measured window (longer at low rates: min_requests)
    # A step meant to hold an answer lasts this long, as the rate must be sustained: the capacity a
    # 15-s step held (two of them, 28.5 req/s, P99 455/624 ms) broke in the tool's 30-s check at 0.8x.
    hold_s: float = 30.0
    min_requests: int = 20              # a step's window holds at least this many arrivals on average
    drain_s: float = 10.0               # after the last arrival, wait this long for answers
    probe_s: float = 8.0
    probe_concurrency: int = 8
    arrivals: str = "poisson"
    burst: bool = True
    burst_s: float = 20.0
    tolerance: float = 0.1
    max_steps: int = 12
    confidence: float = 0.95            # a rate holds when its P99's upper bound at this confidence does
    output_tokens: Optional[int] = None
    seed: int = 0
    # Before a step, wait at most this long for the server to hold no request, so that a step measures
    # the server and not the tail of the step before (a tool that gives up on slow answers leaves them
    # queued).  `vllm bench serve` waits for its answers: in 7 runs of the calibrate test every step
    # found the server empty (settle_s 0.01-0.03 s), and what a rate reads still moved between windows.
    settle_s: float = 120.0

    @property
    def headline_scenario(self) -> str:
        return self.headline or ("mix" if "mix" in self.scenarios else self.scenarios[0])

    def steps_budget(self) -> int:
        """Progress units: a probe and at most ``max_steps`` steps per scenario, and the burst."""
        return 1 + len(self.scenarios) * (self.max_steps + 1) + int(self.burst)


@dataclass
class ScenarioResult:
    scenario: Scenario
    probe_rps: float
    rates: dict[str, float]
    curve: list[dict[str, Any]] = field(default_factory=list)
    capacity_rps: Optional[float] = None
    tokens_per_s: Optional[float] = None
    reason: str = ""
    book: dict[float, RateEvidence] = field(default_factory=dict)   # every rate's pooled standing
    records: dict[float, list[Record]] = field(default_factory=dict)
    windows: dict[float, float] = field(default_factory=dict)       # measured seconds per rate


@dataclass(frozen=True)
class Settled:
    """How a step's start found the server: seconds waited for it to hold no request, and how many it
    still held when the wait ended (None: its /metrics did not answer)."""

    waited_s: float
    held: Optional[float]


async def settle(client: VLLMClient, timeout_s: float, poll_s: float = 0.5) -> Settled:
    """Wait until the server's own gauges (``vllm:num_requests_running`` + ``waiting``) read zero,
    at most ``timeout_s``: a step measures the server, not the tail of the step before it."""
    t0 = time.monotonic()
    while True:
        try:
            m = await client.metrics()
            held: Optional[float] = m.running + m.waiting
        except InstanceError:
            held = None
        waited = time.monotonic() - t0
        if held == 0 or held is None or waited >= timeout_s:
            return Settled(round(waited, 3), held)
        await asyncio.sleep(poll_s)


def _start_text(start: Optional[Settled]) -> str:
    """What a progress line says of a step's start, where it did not find the server empty at once."""
    if start is None or (start.held == 0 and start.waited_s < 1):
        return ""
    if start.held is None:
        return "; its start could not read the server's queue (/metrics did not answer)"
    if start.held:
        return f"; it started with {start.held:g} requests still on the server after {start.waited_s:.3g} s of waiting"
    return f"; it started {start.waited_s:.3g} s late: the server was still serving earlier requests"


def curve_point(st: StepStats, passed: bool, why: str, errors: list[str], rate: RateEvidence,
                start: Optional[Settled] = None) -> dict[str, Any]:
    """One step's own figures and verdict, the standing of its rate over every step at it, and how the
    step's start found the server."""
    def q(x):
        return {k: (None if not math.isfinite(v) else round(v, 3)) for k, v in asdict(x).items()}
    return {"rate_rps": round(st.rate_rps, 4), "passed": passed, "why": why, "failed_on": failed_on(why, passed),
            "settle_s": start.waited_s if start else None, "held_at_start": start.held if start else None,
            "rate_standing": rate.standing.value, "rate_requests": rate.requests,
            "sent": st.sent, "errors": st.errors,
            "error_share": round(st.error_share, 5), "late_share": round(st.late_share, 5),
            "throughput_rps": round(st.throughput_rps, 4), "tokens_per_s": round(st.tokens_per_s, 2),
            "ttft_ms": q(st.ttft_ms), "itl_ms": q(st.itl_ms), "e2e_ms": q(st.e2e_ms),
            "e2e_short_ms": q(st.e2e_short_ms), "error_samples": errors}


def failed_on(why: str, passed: bool) -> list[str]:
    """The bounds a step broke, by name (a step that failed on errors drew its P99 under the line)."""
    if passed:
        return []
    names = ("errors", "late", "TTFT P99", "end-to-end P99", "no request")
    return [n for n in names if any(part.strip().startswith(n) for part in why.split(";"))]


async def _step(engine: LoadEngine, sc: Scenario, step: SearchStep, plan: CalibrationPlan, slo: SLO, seed: int):
    rate = float(step.next_rate)
    window = max(plan.hold_s if step.sustain else plan.step_s, plan.min_requests / rate)
    arrivals = schedule(sc, rate, plan.warmup_s, window, np.random.default_rng(seed), plan.arrivals,
                        min_measured=step.requests)
    window = max(window, arrivals[-1].at_s - plan.warmup_s) if arrivals else window
    records = await engine.send(arrivals, drain_s=plan.drain_s, seed=seed)
    st = step_stats(sc.name, rate, window, records, slo.late_wait_s)
    return st, judge(st, slo), records, window


async def search_scenario(engine: LoadEngine, sc: Scenario, plan: CalibrationPlan, slo: SLO,
                          progress: Progress, client: Optional[VLLMClient] = None) -> ScenarioResult:
    """Probe the scenario's throughput, then step rates until the search has its answer; with the
    server's ``client``, each step starts once :func:`settle` returns (the server holds no request)."""
    probe_rps = await engine.probe(sc, concurrency=plan.probe_concurrency, duration_s=plan.probe_s,
                                    seed=plan.seed)
    if not math.isfinite(probe_rps):
        raise CalibrationError(f"scenario {sc.name}: the server completed no request in the "
                               f"{plan.probe_s:g}-s throughput probe")
    rates = scaled_rates(probe_rps)
    progress(f"{sc.name}: probe {probe_rps:.3g} req/s; low / typical / peak "
             + " / ".join(f"{v:.3g}" for v in rates.values()) + "; the search starts at typical")
    res = ScenarioResult(sc, probe_rps, rates)
    # The ladder starts at typical: the low rate costs a step that rarely says anything (halving
    # from typical reaches below it when typical breaks).
    cfg = SearchConfig(ladder=(rates["typical"], rates["peak"]), tolerance=plan.tolerance, max_steps=plan.max_steps,
                       min_rate=max(rates["low"] / 8, plan.min_requests / (4 * plan.step_s)),  # windows <= 4x
                       resolve=requests_to_resolve(plan.confidence))
    step = next_step(res.book, 0, cfg)
    steps = 0
    while not step.done:
        rate = step.next_rate
        start = await settle(client, plan.settle_s) if client else None
        st, verdict, records, window = await _step(engine, sc, step, plan, slo, plan.seed + steps + 1)
        steps += 1
        res.records.setdefault(rate, []).extend(records)
        res.windows[rate] = res.windows.get(rate, 0.0) + window
        before = res.book.get(rate)
        ev = res.book[rate] = assess(rate, res.records[rate], slo, plan.confidence, sc.name, res.windows[rate],
                                     before.steps + 1 if before else 1,
                                     sustained=bool(before and before.sustained) or window >= plan.hold_s - 1e-9)
        res.curve.append(curve_point(st, verdict.passed, verdict.reason, first_errors(records), ev, start))
        progress(f"{sc.name}: step {steps} at {rate:.4g} req/s, TTFT P99 {st.ttft_ms.p99:.4g} ms over {st.sent} "
                 f"requests; the rate {ev.standing.value} over {ev.requests} of {ev.needed}" + _start_text(start))
        step = next_step(res.book, steps, cfg)
    res.capacity_rps, res.reason = step.capacity_rps, step.reason
    if step.capacity_rps is not None:
        cap = step.capacity_rps
        res.tokens_per_s = round(step_stats(sc.name, cap, res.windows[cap], res.records[cap],
                                            slo.late_wait_s).tokens_per_s, 2)
    return res


async def burst_step(engine: LoadEngine, sc: Scenario, low_rps: float, plan: CalibrationPlan, slo: SLO,
                     bound_ms: float) -> dict[str, Any]:
    """Low rate, then 6x low: how long the P99 TTFT takes to be back under ``bound_ms``."""
    rng = np.random.default_rng(plan.seed + 1000)
    pre = plan.warmup_s + plan.step_s / 2
    calm = schedule(sc, low_rps, 0.0, pre, rng, plan.arrivals)
    high = schedule(sc, low_rps * BURST_FACTOR, 0.0, plan.burst_s, rng, plan.arrivals, start_s=pre)
    records = await engine.send(calm + high, drain_s=plan.drain_s, seed=plan.seed + 1000)
    samples = [(r.arrival.at_s, r.ttft_ms if r.ok else math.inf) for r in records]
    window = max(2.0, plan.burst_s / 8)
    before = [v for t, v in samples if t < pre]
    during = [v for t, v in samples if t >= pre]
    rec = recovery_time_s(samples, pre, bound_ms, window)
    peak = max((p for _, p in window_p99s(samples, pre, window)), default=math.nan)

    def p99(xs: list[float]) -> Optional[float]:  # a failure counts as infinitely slow
        v = quantile(sorted(xs), 0.99) if xs else math.nan
        return round(v, 3) if math.isfinite(v) else None
    return {"scenario": sc.name, "low_rps": round(low_rps, 4), "high_rps": round(low_rps * BURST_FACTOR, 4),
            "step_at_s": round(pre, 3), "burst_s": plan.burst_s, "window_s": window, "bound_ms": bound_ms,
            "recovery_s": None if rec is None else round(rec, 3), "recovered": rec is not None,
            "peak_window_p99_ms": round(peak, 2) if math.isfinite(peak) else None,
            "ttft_p99_before_ms": p99(before), "ttft_p99_during_ms": p99(during),
            "errors": sum(1 for r in records if not r.ok),
            "samples": [[round(t, 3), None if not math.isfinite(v) else round(v, 2)] for t, v in samples]}


async def run_calibration(client: VLLMClient, engine: LoadEngine, plan: CalibrationPlan, slo: SLO,
                          progress: Progress = lambda _: None) -> dict[str, Any]:
    """Every scenario's search and the burst step, each step sent by ``engine`` (the client only
    asks the server what it serves); raises CalibrationError when the headline scenario has no
    rate meeting the SLO."""
    info = await client.model_info()
    scenarios, scaling = scaled_scenarios(info.max_model_len or 2048, plan.scenarios, plan.output_tokens)
    progress(f"model {info.id}, max model length {info.max_model_len}: {scaling.note}")
    results = {}
    for sc in scenarios:
        results[sc.name] = await search_scenario(engine, sc, plan, slo, progress, client)
    head = results[plan.headline_scenario]
    if head.capacity_rps is None:
        last = head.curve[-1] if head.curve else {}
        raise CalibrationError(f"no rate meets the SLO ({slo.describe()}) for scenario {head.scenario.name}: "
                               f"{head.reason}; at {last.get('rate_rps')} req/s: {last.get('why')}")
    burst = None
    if plan.burst:
        short = next((s for s in scenarios if s.name == "short"), scenarios[0])
        bound = slo.ttft_p99_ms if slo.ttft_p99_ms is not None else slo.late_wait_s * 1000.0
        await settle(client, plan.settle_s)
        burst = await burst_step(engine, short, results[short.name].rates["low"], plan, slo, bound)
        progress(f"burst {burst['low_rps']:.3g} -> {burst['high_rps']:.3g} req/s: {report.burst_text(burst)}")
    return {"model": info.id, "max_model_len": info.max_model_len, "scaling": scaling, "results": results,
            "headline": head, "burst": burst}
