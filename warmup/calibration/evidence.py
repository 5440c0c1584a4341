"""What every step at one rate measured, pooled, and how sure it makes the search (pure).

A P99 read from a 15-s step of a few dozen requests is its two or three slowest requests: one
stall of the machine fails the step, one lucky step passes a rate past the knee, and a rate that
"meets" then "breaks" says nothing.  So a rate is judged over every request sent at it, with
distribution-free confidence bounds on the P99 (order statistics of the binomial), and it
*holds* only when, over at least :func:`requests_to_resolve` requests (299 at 95%: fewer and
even the slowest request is no 95% upper bound of the P99) in at least two load steps, one of
them sustained (as long as the plan's hold), the SLO holds on the pooled figures and the P99's
upper bound is within the bound.  It *broke* as soon as the P99's lower bound (or the error and
late shares' lower bounds) are over the SLO, or when those requests did not hold.
Requests are not independent near the knee (a queue carries over), so the bounds are the
textbook ones for independent samples and the report says so.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.stats import beta, binom

from warmcast.config.slo import SLO
from warmup.calibration.search import RateEvidence, Standing, judge, ms_text
from warmup.calibration.steps import Record, step_stats

P99 = 0.99
# A rate holds, or breaks on its upper bound, only over this many separate load steps: the requests
# of one step share the server's state (the test's 32.8 req/s held over 492 requests in one 15-s step,
# and the tool alone then broke the SLO at 0.8x of it twice).
CONFIRM_STEPS = 2


def requests_to_resolve(confidence: float, q: float = P99, over: int = 0) -> int:
    """The fewest requests whose ``over + 1``-th slowest is a ``confidence`` upper bound of the ``q``
    quantile: with ``over`` requests past the bound, that many show the rest holds it (299 with none,
    473 with one, 628 with two at 95%): P(Binomial(n, 1 - q) > over) >= confidence."""
    ns = np.arange(over + 1, math.ceil((over + 1) * 10 / (1.0 - q)) + 1)
    return int(ns[np.argmax(binom.sf(over, ns, 1.0 - q) >= confidence)])


def quantile_bounds(sorted_xs: Sequence[float], confidence: float, q: float = P99) -> tuple[float, float]:
    """One-sided ``confidence`` (lower, upper) bounds of the ``q`` quantile from a sorted sample:
    the order statistics x_(k) with P(x_(k) <= true) >= confidence (lower) and P(x_(k) >= true) >=
    confidence (upper); -inf / inf where the sample is too small to give one."""
    cdf = binom.cdf(np.arange(len(sorted_xs)), len(sorted_xs), q)   # [k - 1]: P(Binomial <= k - 1)
    up, low = np.flatnonzero(cdf >= confidence), np.flatnonzero(1.0 - cdf >= confidence)
    return (sorted_xs[low[-1]] if low.size else -math.inf), (sorted_xs[up[0]] if up.size else math.inf)


def share_lower_bound(events: int, n: int, confidence: float) -> float:
    """One-sided ``confidence`` lower bound of a share from ``events`` of ``n`` (Clopper-Pearson)."""
    return float(beta.ppf(1.0 - confidence, events, n - events + 1)) if events > 0 and n > 0 else 0.0


def assess(rate: float, records: Sequence[Record], slo: SLO, confidence: float, scenario: str = "",
           window_s: float = 1.0, steps: int = 1, sustained: bool = True) -> RateEvidence:
    """The standing of one rate from every request measured at it in ``steps`` load steps;
    ``sustained``: one of them lasted the plan's hold (a queue near the knee grows over a long step)."""
    measured = [r for r in records if r.arrival.measured]
    stats = step_stats(scenario, rate, window_s, measured, slo.late_wait_s)
    pooled = judge(stats, slo)
    ttft = sorted(r.ttft_ms if r.ok and math.isfinite(r.ttft_ms) else math.inf for r in measured)
    # A stall of the machine makes a request or two slow at any rate: with k of them past the bound, the
    # rate is resolved over the requests that make the (k+1)-th slowest an upper bound, not broken at 299.
    over = sum(t > slo.ttft_p99_ms for t in ttft) if slo.ttft_p99_ms is not None else 0
    needed = requests_to_resolve(confidence, over=over if pooled.passed else 0)
    lower, upper = quantile_bounds(ttft, confidence) if ttft else (-math.inf, math.inf)
    p99_bounds = [("TTFT P99", slo.ttft_p99_ms, lower, upper)] if slo.ttft_p99_ms is not None else []
    if slo.e2e_p99_ms is not None:
        e2e = sorted(r.e2e_ms if r.ok else math.inf for r in measured if r.arrival.label == "short")
        if e2e:
            p99_bounds.append(("end-to-end P99 (short prompts)", slo.e2e_p99_ms, *quantile_bounds(e2e, confidence)))
    n = stats.sent
    sure_over = [f"{name}'s lower bound {lo:.4g} ms > {b:g} ms" for name, b, lo, _ in p99_bounds if lo > b]
    for name, events, allowed in (("errors", stats.errors, slo.error_share), ("late", stats.late, slo.late_share)):
        low = share_lower_bound(events, n, confidence)
        if low > allowed:
            sure_over.append(f"{name} {events} of {n}: share's lower bound {low * 100:.3g}% > {allowed * 100:g}%")
    unsure_upper = [f"{name}'s upper bound {ms_text(up)} > {b:g} ms" for name, b, _, up in p99_bounds if not up <= b]
    if sure_over:
        standing, why = Standing.BROKE, "; ".join(sure_over)
    elif n >= needed and steps >= CONFIRM_STEPS and sustained:
        ok = pooled.passed and not unsure_upper
        standing = Standing.HELD if ok else Standing.BROKE
        why = pooled.reason if ok or not pooled.passed else "; ".join(unsure_upper)
    else:
        ok = pooled.passed and not (n >= needed and unsure_upper)
        standing = Standing.PASSING if ok else Standing.UNSURE
        why = (f"{pooled.reason if ok or not pooled.passed else '; '.join(unsure_upper)}; "
               + (f"{needed - n} more requests to resolve the P99" if n < needed
                  else "one step: measure it again" if steps < CONFIRM_STEPS
                  else "no step lasted the hold: measure it again, as long"))
    return RateEvidence(rate, standing, n, needed, stats.ttft_ms.p99, lower, upper, why, steps, sustained)
