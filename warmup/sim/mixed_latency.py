"""Time to first token in a fleet of two profiles (a switch's canary, move and settle).

Routing is round robin, as a Kubernetes Service spreads requests: every ready replica gets the
same share of the minute's arrivals whatever its profile, so a profile gets its share of the ready
replicas (the canary's one replica of ten: 10%) and each of its replicas the fleet's arrivals over
all ready replicas.  Behind a weighted route (``routing: weights``) a profile gets its weight's share
instead, spread over its own ready replicas.  A profile's TTFT percentiles come from its own calibrated curve at that rate
(log-linear survival between P50, P95 and P99, as ``latency.share_slower_than``; past the curve's
last measured rate its last point).  The P99s add the longest wait the fleet's queue made that
minute, as ``latency.estimate_ttft_p99_ms`` does; the fleet's P99 is the 99th percentile of the
mixture.  Requests the queue did not already make late are late from latency where their profile's
TTFT exceeds the late wait, as ``latency.late_below_saturation`` counts them.

Stated limits: one FIFO queue serves the fleet (a slower profile's replicas do not build a queue
of their own); a profile without a calibration is read on the documented default curve at its
declared capacity (``latency.default_curve``, issue 42: without it the breaker saw no P99 at all).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from warmup.sim.latency import LatencyCurve, percentiles_ms, share_slower_than


@dataclass(frozen=True)
class MinuteLatency:
    """One minute's latency: the fleet's and each profile's TTFT P99 (s) and the requests late from it."""

    fleet_p99_s: Optional[float]
    p99_by_profile: tuple[tuple[str, float], ...]
    late: float


NONE = MinuteLatency(None, (), 0.0)


def mixture_quantile(parts: list[tuple[float, tuple[float, float, float]]], q: float = 0.99) -> float:
    """The ``q`` quantile (ms) of a mixture of (weight, (P50, P95, P99)) latency laws, by bisection
    on the mixture's survival."""
    def survival(w: float) -> float:
        return sum(f * share_slower_than(*p, w) for f, p in parts)

    lo, hi = 0.0, max(p[2] for _, p in parts) * 4.0 + 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if survival(mid) > 1.0 - q else (lo, mid)
    return hi


def minute_latency(curves: Mapping[str, LatencyCurve], ready: Mapping[str, int], demand: float,
                   queue_late: float, queue_wait_s: float, late_wait_s: float,
                   shares: Optional[Mapping[str, float]] = None) -> MinuteLatency:
    """The minute's latency from the ready replicas per profile (see the module docstring); ``shares``:
    each profile's share of the requests where a weighted route sets it (None: round robin, each
    profile its share of the ready replicas)."""
    total = sum(ready.values())
    known = {p: n for p, n in ready.items() if n > 0 and p in curves}
    if total <= 0 or demand <= 0 or not known or not math.isfinite(queue_wait_s):
        return NONE
    share = {p: (shares or {}).get(p, 0.0) if shares is not None else n / total for p, n in known.items()}
    wait_ms = 1000.0 * queue_wait_s
    base = {p: percentiles_ms(curves[p], demand * share[p] / n / 60.0) for p, n in known.items()}
    parts = [(share[p], tuple(x + wait_ms for x in base[p])) for p in known if share[p] > 0]
    if not parts:
        return NONE
    fleet = parts[0][1][2] if len(parts) == 1 else mixture_quantile(parts)
    open_ = max(0.0, demand - queue_late)   # the requests the queue did not already make late
    late = sum(share[p] * open_ * share_slower_than(*base[p], 1000.0 * late_wait_s)
               for p in known if curves[p].shape)
    return MinuteLatency(fleet / 1000.0, tuple((p, (base[p][2] + wait_ms) / 1000.0) for p in sorted(known)
                                               if share[p] > 0), late)
