"""Load steps as values: the arrival schedule of a step and the statistics of what came back.

Pure: the load generator (:mod:`warmup.calibration.loadgen`) sends a schedule and returns
one :class:`Record` per arrival; :func:`step_stats` turns those into the step's
:class:`~warmup.calibration.search.StepStats`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from warmup.calibration.search import Quantiles, Scenario, StepStats


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float          # from the start of the step
    prompt: int          # prompt tokens
    output: int          # generated tokens
    label: str           # the scenario part: short / medium / long
    measured: bool       # False during the warm-up period


@dataclass(frozen=True, slots=True)
class Record:
    arrival: Arrival
    ok: bool
    ttft_ms: float = math.nan
    e2e_ms: float = math.nan
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""

    @property
    def itl_ms(self) -> float:
        if not self.ok or self.completion_tokens < 2:
            return math.nan
        return (self.e2e_ms - self.ttft_ms) / (self.completion_tokens - 1)


def schedule(scenario: Scenario, rate_rps: float, warmup_s: float, measure_s: float, rng: np.random.Generator,
             arrivals: str = "poisson", start_s: float = 0.0, min_measured: int = 0) -> list[Arrival]:
    """Open-loop arrivals at ``rate_rps`` for ``warmup_s`` (not measured) then ``measure_s`` seconds,
    or on until ``min_measured`` arrivals are measured (a confirmation that must resolve a P99).

    ``poisson``: exponential gaps (what ``vllm bench serve`` sends by default); ``constant``:
    equal gaps.  Each request draws its part of the scenario's mix by share.
    """
    if rate_rps <= 0:
        raise ValueError(f"rate must be > 0 req/s, got {rate_rps}")
    if arrivals not in ("poisson", "constant"):
        raise ValueError(f"arrivals must be poisson or constant, got {arrivals!r}")
    shares = np.array([p[0] for p in scenario.parts], float)
    out, t, end, measured = [], start_s, start_s + warmup_s + measure_s, 0
    while True:
        t += rng.exponential(1.0 / rate_rps) if arrivals == "poisson" else 1.0 / rate_rps
        if t >= end and measured >= min_measured:
            return out
        measured += t >= start_s + warmup_s
        _, prompt, label = scenario.parts[int(rng.choice(len(shares), p=shares / shares.sum()))]
        out.append(Arrival(t, prompt, scenario.output, label, t >= start_s + warmup_s))


def step_stats(scenario: str, rate_rps: float, measure_s: float, records: Sequence[Record],
               late_wait_s: float) -> StepStats:
    """The step's statistics over its measured requests (a failed or unfinished one is an error
    and, having no first token in time, also late)."""
    rs = [r for r in records if r.arrival.measured]
    good = [r for r in rs if r.ok]
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in good)
    late = sum(1 for r in rs if not r.ok or not (r.ttft_ms <= late_wait_s * 1000.0))
    short = [r.e2e_ms for r in good if r.arrival.label == "short"]
    return StepStats(
        scenario=scenario, rate_rps=rate_rps, duration_s=measure_s, sent=len(rs), ok=len(good),
        errors=len(rs) - len(good), throughput_rps=len(good) / measure_s, tokens_per_s=tokens / measure_s,
        ttft_ms=Quantiles.of([r.ttft_ms for r in good]), itl_ms=Quantiles.of([r.itl_ms for r in good]),
        e2e_ms=Quantiles.of([r.e2e_ms for r in good]), e2e_short_ms=Quantiles.of(short), late=late)


def first_errors(records: Sequence[Record], n: int = 3) -> list[str]:
    """A few distinct error messages of a step, for the report."""
    seen: list[str] = []
    for r in records:
        if not r.ok and r.error not in seen:
            seen.append(r.error)
    return seen[:n]
