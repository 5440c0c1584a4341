"""Capacity calibration, the pure part: what a load step measured, whether it meets the SLO,
which rate to try next, and how the test matrix scales to a smaller server.

No I/O here: the load engine (:mod:`warmup.calibration.benchserve`) measures steps, the
runner feeds their :class:`StepStats` to :func:`next_step` until it says done.  The search
is a ladder (low / typical / peak, from the throughput probe) until the first failing
rate, then bisection between the last passing and the first failing rate until they are
within ``tolerance`` of each other; all passing grows the rate, all failing halves it down
to ``min_rate`` (below that no rate meets the SLO and the search says so).  A failing rate is
measured twice before it counts (``SearchConfig.confirm``); a passing one is believed at once
while the search goes on, but the rate it answers with must have passed as often, also when the
step budget is spent (up to ``confirm`` steps past it confirm the answer; near the
knee one lucky step passes: bench/calibrate.py once answered such a rate, and the tool alone
then broke the SLO at 0.8x of it); a rate that has both passed and failed as often is measured
again, and the majority decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from warmcast.config.slo import SLO
from warmup.core.stats import quantile

# The matrix on a production GPU (issue 15): prompt lengths and request rates.
REFERENCE_PROMPTS = {"short": 1024, "medium": 4096, "long": 32768}
REFERENCE_OUTPUT = 256
REFERENCE_RATES = {"low": 50.0, "typical": 200.0, "peak": 500.0}   # requests/s
MIX_LONG_SHARE = 0.3        # the mix scenario: 70% short + 30% long
BURST_FACTOR = 6.0          # burst step: low -> 6x low
CONFIRM = 2                 # SearchConfig.confirm's default


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
    confirm: int = CONFIRM         # measurements before a failure counts, and before the answer stands


@dataclass(frozen=True, slots=True)
class Trial:
    rate_rps: float
    passed: bool


@dataclass(frozen=True, slots=True)
class SearchStep:
    next_rate: Optional[float]     # None: done
    capacity_rps: Optional[float]  # done: the highest rate that met the SLO (None: none did)
    reason: str

    @property
    def done(self) -> bool:
        return self.next_rate is None


def verdicts(trials: Sequence[Trial], confirm: int = 1) -> dict[float, Optional[bool]]:
    """Per rate tried: True while it passed more often than it failed; False once it failed
    ``confirm`` times and more often than it passed; None while a failure awaits confirmation or
    the two are tied.  Past the knee a queue builds step after step, so failures repeat; a
    transient stall of the machine fails one step, and its repeat passes.  At the knee itself one
    pass and one fail are a coin toss (bench/calibrate.py took such a rate as capacity and the
    tool alone then broke the SLO at 0.8x of it), so a third measurement decides."""
    runs: dict[float, list[bool]] = {}
    for t in trials:
        runs.setdefault(t.rate_rps, []).append(t.passed)

    def verdict(v: list[bool]) -> Optional[bool]:
        passed, failed = sum(v), len(v) - sum(v)
        if passed > failed:
            return True
        return False if failed > passed and failed >= confirm else None
    return {r: verdict(v) for r, v in runs.items()}


def bracket(trials: Sequence[Trial], confirm: int = 1) -> tuple[Optional[float], Optional[float]]:
    """(last passing, first failing) rate.  A pass above a failure is noise and is not trusted:
    the last passing rate is the highest pass *below* the lowest failure."""
    v = verdicts(trials, confirm)
    fails = [r for r, x in v.items() if x is False]
    first_fail = min(fails) if fails else None
    passes = [r for r, x in v.items() if x is True and (first_fail is None or r < first_fail)]
    return (max(passes) if passes else None), first_fail


def next_step(trials: Sequence[Trial], cfg: SearchConfig) -> SearchStep:
    """The next rate to measure, or the answer, from the trials so far."""
    ok, bad = bracket(trials, cfg.confirm)
    if len(trials) >= cfg.max_steps:
        return _budget_spent(trials, cfg, ok, bad)
    pending = [r for r, x in verdicts(trials, cfg.confirm).items() if x is None]
    if pending:
        return SearchStep(pending[0], None, f"{pending[0]:.4g} req/s failed as often as it passed: measure it again")
    if bad is None:
        tried = max((t.rate_rps for t in trials), default=0.0)
        above = [r for r in cfg.ladder if r > tried]
        if above:
            return SearchStep(above[0], None, f"ladder: next {above[0]:.4g} req/s")
        return SearchStep(tried * cfg.growth, None, f"every rate up to {tried:.4g} req/s met the SLO: "
                                                    f"try {tried * cfg.growth:.4g}")
    if ok is None:
        half = bad / 2.0
        if half < cfg.min_rate:
            return SearchStep(None, None, f"no rate meets the SLO: {bad:.4g} req/s failed and the search "
                                          f"stops at {cfg.min_rate:.4g} req/s")
        return SearchStep(half, None, f"{bad:.4g} req/s failed with no pass below: try {half:.4g}")
    if bad - ok <= cfg.tolerance * ok:
        if _passes(trials, ok) < cfg.confirm:  # the answer is the one rate a planner will trust
            return SearchStep(ok, None, f"{ok:.4g} req/s would be the capacity: measure it again to confirm")
        return SearchStep(None, ok, _answer(ok, bad, trials, cfg.confirm))
    mid = (ok + bad) / 2.0
    return SearchStep(mid, None, f"bisect {ok:.4g} (passed) .. {bad:.4g} (failed): try {mid:.4g}")


def _budget_spent(trials: Sequence[Trial], cfg: SearchConfig, ok: Optional[float],
                  bad: Optional[float]) -> SearchStep:
    """The budget bounds the search, not the answer's confirmation: failures measured twice can
    spend it with the answer passed once (bench/calibrate.py answered three of four scenarios so,
    2026-12-05).  Up to ``confirm`` steps past it measure the answer again; where that ties it, the
    next pass down is the answer and is measured in turn.  What is still unconfirmed then says so."""
    if ok is not None and _passes(trials, ok) < cfg.confirm and len(trials) < cfg.max_steps + cfg.confirm:
        return SearchStep(ok, None, f"step budget ({cfg.max_steps}) spent; {ok:.4g} req/s would be the "
                                    "capacity: measure it again to confirm")
    return SearchStep(None, ok, f"step budget ({cfg.max_steps}) spent; " + _answer(ok, bad, trials, cfg.confirm))


def _passes(trials: Sequence[Trial], rate: float) -> int:
    return sum(1 for t in trials if t.rate_rps == rate and t.passed)


def _answer(ok: Optional[float], bad: Optional[float], trials: Sequence[Trial], confirm: int) -> str:
    if ok is None:
        return "no rate met the SLO"
    passes = _passes(trials, ok)
    seen = f"passed {passes} of {sum(1 for t in trials if t.rate_rps == ok)}"
    if passes < confirm:
        seen += ", unconfirmed"
    return f"capacity {ok:.4g} req/s ({seen}" + (f"; {bad:.4g} failed)" if bad is not None else ")")


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
