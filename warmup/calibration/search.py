"""Capacity calibration, the pure part: what a load step measured, whether it meets the SLO,
which rate to try next, and how the test matrix scales to a smaller server.

No I/O here: the load engine (:mod:`warmup.calibration.benchserve`) measures steps, the
runner pools every request sent at a rate into its :class:`RateEvidence`
(:mod:`warmup.calibration.evidence` judges it) and feeds them to :func:`next_step` until it says
done.  The search is a ladder (the runner gives typical and peak, from the throughput probe)
until the first rate that broke, then bisection between the highest passing and the lowest broken
rate until they are within ``tolerance`` of each other; all passing grows the rate, all broken halves it
down to ``min_rate``.  A rate that broke, not surely, is measured again; the rate the search
would answer is measured until its requests resolve the P99 (issue 46: steps of a few dozen
requests passed and failed the same rate, and the tool alone broke the SLO at 0.8x the answer).
``max_steps`` bounds every step, confirmations included.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Optional, Sequence

from warmcast.config.slo import SLO
from warmup.core.stats import quantile

# The matrix on a production GPU (issue 15): prompt lengths and request rates.
REFERENCE_PROMPTS = {"short": 1024, "medium": 4096, "long": 32768}
REFERENCE_OUTPUT = 256
REFERENCE_RATES = {"low": 50.0, "typical": 200.0, "peak": 500.0}   # requests/s
MIX_LONG_SHARE = 0.3        # the mix scenario: 70% short + 30% long
BURST_FACTOR = 6.0          # burst step: low -> 6x low
# A confirmation asks for a few more requests than it lacks: a load tool may leave one out of its
# report (GuideLLM 0.8.1 did, and a confirmation ended at 298 of 299, costing a step).
CONFIRM_MARGIN = 0.03
DESCENT = 1.5               # after a long measurement broke, the next rate is this many tolerances lower


@dataclass(frozen=True, slots=True)
class Quantiles:
    p50: float
    p95: float
    p99: float

    @staticmethod
    def of(values_ms: Sequence[float]) -> "Quantiles":
        """P50/P95/P99 (linear interpolation, as numpy's default) of a sample; NaN when empty."""
        xs = sorted(v for v in values_ms if math.isfinite(v))
        if not xs:
            return Quantiles(math.nan, math.nan, math.nan)
        return Quantiles(*(quantile(xs, q) for q in (0.50, 0.95, 0.99)))


@dataclass(frozen=True, slots=True)
class StepStats:
    """One load step at an offered rate, over the requests sent in its measured window."""

    scenario: str
    rate_rps: float            # offered
    duration_s: float          # measured window
    sent: int
    ok: int
    errors: int                # failed or unfinished by the step's deadline
    throughput_rps: float      # completed requests / window
    tokens_per_s: float        # prompt + generated tokens of completed requests / window
    ttft_ms: Quantiles
    itl_ms: Quantiles          # inter-token latency: (e2e - TTFT) / (generated - 1), per request
    e2e_ms: Quantiles
    e2e_short_ms: Quantiles    # end-to-end of the short-prompt requests only (NaN: none in this step)
    late: int                  # requests whose first token took longer than the SLO's late wait

    @property
    def error_share(self) -> float:
        return self.errors / self.sent if self.sent else 0.0

    @property
    def late_share(self) -> float:
        return self.late / self.sent if self.sent else 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    reason: str


def judge(stats: StepStats, slo: SLO) -> Verdict:
    """Whether one step meets the SLO, naming each bound checked (the first broken one first)."""
    if stats.sent == 0:
        return Verdict(False, "no request was sent in the measured window")
    checks = [("errors", stats.error_share * 100, slo.error_share * 100, "%"),
              (f"late (TTFT > {slo.late_wait_s:g} s)", stats.late_share * 100, slo.late_share * 100, "%")]
    if slo.ttft_p99_ms is not None:
        checks.append(("TTFT P99", stats.ttft_ms.p99, slo.ttft_p99_ms, " ms"))
    if slo.e2e_p99_ms is not None and math.isfinite(stats.e2e_short_ms.p99):
        checks.append(("end-to-end P99 (short prompts)", stats.e2e_short_ms.p99, slo.e2e_p99_ms, " ms"))
    broken = [f"{name} {got:.4g}{unit} > {bound:.4g}{unit}" for name, got, bound, unit in checks
              if not (got <= bound)]  # NaN (nothing completed) breaks the bound
    if broken:
        return Verdict(False, "; ".join(broken))
    return Verdict(True, "; ".join(f"{name} {got:.4g}{unit} <= {bound:.4g}{unit}" for name, got, bound, unit in checks))


@dataclass(frozen=True, slots=True)
class SearchConfig:
    ladder: tuple[float, ...]      # rates (req/s) tried first, ascending: low, typical, peak
    min_rate: float                # halving below this gives up: no rate meets the SLO
    tolerance: float = 0.1         # done when first failing - last passing <= tolerance * last passing
    max_steps: int = 10
    growth: float = 2.0            # every rate so far passed: try this much more
    resolve: int = 0               # requests that resolve a P99: a step meant to hold an answer asks this many


class Standing(str, Enum):
    HELD = "held"          # >= the requests to resolve, the SLO held, the P99's upper bound within it
    PASSING = "passing"    # the SLO holds on what was sent so far, too few requests to be sure
    UNSURE = "unsure"      # over the SLO so far, not surely: measure again
    BROKE = "broke"        # surely over the SLO, or enough requests that did not hold


@dataclass(frozen=True, slots=True)
class RateEvidence:
    rate_rps: float
    standing: Standing
    requests: int                  # measured requests at this rate, every step pooled
    needed: int                    # requests to resolve the P99 at the confidence
    ttft_p99_ms: float             # pooled sample P99 (a failure counts as infinitely slow)
    ttft_p99_lower_ms: float
    ttft_p99_upper_ms: float
    reason: str
    steps: int = 1                 # the load steps pooled
    sustained: bool = False        # one of them lasted the plan's hold

    def describe(self) -> str:
        return (f"{self.rate_rps:.4g} req/s {self.standing.value} over {self.requests} requests "
                f"(TTFT P99 {ms_text(self.ttft_p99_ms)}, {ms_text(self.ttft_p99_lower_ms)} .. "
                f"{ms_text(self.ttft_p99_upper_ms)}): {self.reason}")


def ms_text(x: float) -> str:
    return "inf" if math.isinf(x) and x > 0 else ("-" if math.isinf(x) else f"{x:.4g} ms")


@dataclass(frozen=True, slots=True)
class SearchStep:
    next_rate: Optional[float]     # None: done
    capacity_rps: Optional[float]  # done: the highest rate that held (None: none did)
    reason: str
    requests: int = 0              # the step must hold this many requests (a confirmation), else any
    sustain: bool = False          # the step is meant to hold an answer: it lasts the plan's hold

    @property
    def done(self) -> bool:
        return self.next_rate is None


def next_step(book: Mapping[float, RateEvidence], steps: int, cfg: SearchConfig) -> SearchStep:
    """The next rate to measure, or the answer: the highest rate that held below the lowest that
    broke.  A passing rate is believed while the search climbs; the one it would answer is measured
    until its requests resolve the P99 (on the last step of the budget at the latest)."""
    bad = min((r for r, e in book.items() if e.standing is Standing.BROKE), default=None)
    below = {r: e for r, e in book.items() if bad is None or r < bad}
    ok = max((r for r, e in below.items() if e.standing in (Standing.HELD, Standing.PASSING)), default=None)
    if steps >= cfg.max_steps:
        return _done(below, bad, f"step budget ({cfg.max_steps}) spent; ")
    # Once a rate passed, the last two steps can each hold an answer (below any pass, short steps look)
    full = cfg.resolve if cfg.max_steps - steps <= 2 and ok is not None else 0
    if ok is not None and below[ok].standing is Standing.PASSING and (
            steps == cfg.max_steps - 1 or _converged(ok, bad, cfg)):
        return _confirm(below[ok])
    unsure = sorted(r for r, e in below.items() if e.standing is Standing.UNSURE)
    if unsure:
        return SearchStep(unsure[0], None, f"{unsure[0]:.4g} req/s is not resolved: measure it again, sustained",
                          full, sustain=True)
    if bad is None:
        tried = max(book, default=0.0)
        nxt = next((r for r in cfg.ladder if r > tried), tried * cfg.growth)
        why = (f"ladder: next {nxt:.4g} req/s" if nxt in cfg.ladder
               else f"every rate up to {tried:.4g} req/s met the SLO")
        return SearchStep(nxt, None, f"{why}: try {nxt:.4g}", full, sustain=full > 0)
    if ok is not None and book[bad].sustained and not _converged(ok, bad, cfg):  # with no pass: halve below
        return _descend(below, ok, book[bad], cfg)
    if ok is None:
        half = bad / 2.0
        if half < cfg.min_rate:
            return _done(below, bad, f"the search stops at {cfg.min_rate:.4g} req/s; ")
        return SearchStep(half, None, f"{bad:.4g} req/s broke with no pass below: try {half:.4g}", full,
                          sustain=full > 0)
    if below[ok].standing is Standing.PASSING:  # short steps pass rates past the knee: hold it before going on
        return _confirm(below[ok])
    if _converged(ok, bad, cfg):
        return _done(below, bad, "")
    mid = (ok + bad) / 2.0
    return SearchStep(mid, None, f"bisect {ok:.4g} ({below[ok].standing.value}) .. {bad:.4g} (broke): try {mid:.4g}",
                      full, sustain=full > 0)


def _confirm(e: RateEvidence) -> SearchStep:
    more = max(0, e.needed - e.requests) + max(3, math.ceil(CONFIRM_MARGIN * e.needed))
    return SearchStep(e.rate_rps, None, f"{e.rate_rps:.4g} req/s would be the capacity: measure it, sustained, "
                                        f"until {e.needed} requests resolve its P99 ({more} more)", more, sustain=True)


def _descend(below: Mapping[float, RateEvidence], ok: Optional[float], broke: RateEvidence,
             cfg: SearchConfig) -> SearchStep:
    """``broke`` broke in a sustained step: a queue near the knee grows over a long measurement, so
    short steps overstate what holds (bench: calibrate_engines, 2026-12-06: 6.9 req/s passed 104
    requests in 15 s and broke over 300; the test: 26 req/s passed a 15-s step, P99 432 ms, and broke
    a 30-s one, 2,189 ms).  Bisecting below it on short steps would pass rates that break again, so
    the next rate is a decisive step down, sustained at once."""
    target = broke.rate_rps * (1.0 - DESCENT * cfg.tolerance)
    if ok is not None and target <= ok:
        return _confirm(below[ok]) if below[ok].standing is Standing.PASSING else _done(below, broke.rate_rps, "")
    return SearchStep(target, None, f"{broke.rate_rps:.4g} req/s broke sustained over {broke.requests} requests: "
                                    f"measure {target:.4g}, sustained", cfg.resolve, sustain=True)


def _converged(ok: float, bad: Optional[float], cfg: SearchConfig) -> bool:
    return bad is not None and bad - ok <= cfg.tolerance * ok


def _done(below: Mapping[float, RateEvidence], bad: Optional[float], prefix: str) -> SearchStep:
    held = max((r for r, e in below.items() if e.standing is Standing.HELD), default=None)
    broke = f"; {bad:.4g} req/s broke" if bad is not None else ""
    if held is None:
        return SearchStep(None, None, prefix + "no rate meets the SLO with confidence" + broke)
    return SearchStep(None, held, prefix + f"capacity {below[held].describe()}" + broke)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A request mix: (share, prompt tokens, label) parts; every request generates ``output`` tokens."""

    name: str
    parts: tuple[tuple[float, int, str], ...]
    output: int


@dataclass(frozen=True, slots=True)
class Scaling:
    factor: float       # prompt lengths relative to the production matrix
    note: str


def scaled_scenarios(max_model_len: int, names: Sequence[str] = ("short", "medium", "long", "mix"),
                     output: Optional[int] = None) -> tuple[tuple[Scenario, ...], Scaling]:
    """The matrix's scenarios at this server's context length (1k/4k/32k where it fits)."""
    out = output or max(8, min(REFERENCE_OUTPUT, max_model_len // 16))
    room = max(1, max_model_len - out)
    factor = min(1.0, room / REFERENCE_PROMPTS["long"])
    lengths = {k: max(1, int(v * factor)) for k, v in REFERENCE_PROMPTS.items()}
    mix = ((1 - MIX_LONG_SHARE, lengths["short"], "short"), (MIX_LONG_SHARE, lengths["long"], "long"))
    table = {k: Scenario(k, ((1.0, n, k),), out) for k, n in lengths.items()} | {"mix": Scenario("mix", mix, out)}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown scenario(s) {unknown}; known: {sorted(table)}")
    note = ("prompt lengths as on a production GPU (1k/4k/32k)" if factor >= 1.0 else
            f"prompt lengths scaled by {factor:.4g} to the server's max model length {max_model_len} "
            f"(1k/4k/32k -> {lengths['short']}/{lengths['medium']}/{lengths['long']} tokens)")
    return tuple(table[n] for n in names), Scaling(factor, note + f"; {out} generated tokens per request")


def scaled_rates(probe_rps: float) -> dict[str, float]:
    """low / typical / peak rates for a server whose probe served ``probe_rps``: the production
    matrix (50/200/500 req/s) scaled so that its peak is the probe's throughput."""
    f = probe_rps / REFERENCE_RATES["peak"]
    return {k: v * f for k, v in REFERENCE_RATES.items()}


def window_p99s(samples: Sequence[tuple[float, float]], step_at_s: float,
                window_s: float) -> list[tuple[float, float]]:
    """(window start s, P99 TTFT ms) of the windows of ``window_s`` that advance by half a window
    from the step to the last sample after it (a failure, NaN or inf, counts as infinitely slow)."""
    after = sorted(s for s in samples if s[0] >= step_at_s)
    out: list[tuple[float, float]] = []
    t = step_at_s
    while after and t <= after[-1][0]:
        ttfts = [v if math.isfinite(v) else math.inf for s, v in after if t <= s < t + window_s]
        if ttfts:
            out.append((t, quantile(sorted(ttfts), 0.99)))
        t += window_s / 2
    return out


def recovery_time_s(samples: Sequence[tuple[float, float]], step_at_s: float, bound_ms: float,
                    window_s: float) -> Optional[float]:
    """Seconds after the burst starts until the rolling P99 TTFT is back under ``bound_ms`` for good.

    ``samples`` are (send time s, TTFT ms; NaN or inf for a failure), in :func:`window_p99s`'
    windows; 0 when no window after the step breaks the bound, None when the last one still does
    (not recovered within the run).
    """
    windows = window_p99s(samples, step_at_s, window_s)
    if not windows:
        return None
    bad = [t for t, p99 in windows if p99 > bound_ms]
    if not bad:
        return 0.0
    end = max(s for s, _ in samples)
    if bad[-1] + window_s > end:
        return None
    return bad[-1] + window_s - step_at_s
