"""The autoscaler warmcast replaces, followed tick by tick, so warmcast never holds less (issue 27).

The Kubernetes HPA's documented rules (autoscaling/v2, a request-rate metric with an
``AverageValue`` target of ``capacity * target_utilisation`` per pod), decided once a minute:
- no change while the usage ratio ``metric / (target * replicas)`` is within 10% of 1;
- scale-up limited per 15 s sync to the larger of +100% and +4 pods (four syncs a minute);
- scale-down to the highest recommendation of the stabilisation window (default 5 min).

The simulator's reactive baseline (``warmup.sim.autoscalers``) steps these same functions.  The
core keeps that HPA's own replica count in its state (:class:`HPAState`), fed the load the HPA
would read, so it is the count that HPA would hold on this load from the same start, whatever
warmcast holds; the ``reactive_guard`` guardrail (``prescale.stage_reactive_guard``) keeps warmcast's count
at or above it: never later than the autoscaler it replaces.  Pure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from warmup.core.config import ScalingConfig

SYNC_S = 15.0
TOLERANCE = 0.1
UP_PERCENT = 100.0
UP_PODS = 4


@dataclass(frozen=True, slots=True)
class HPAState:
    """The followed HPA's replicas (-1: not started; it starts from the fleet's count) and its
    recent recommendations, newest last (the scale-down window)."""

    replicas: int = -1
    recent: tuple[int, ...] = ()


def recommend(current: int, metric: float, per_pod_target: float, tolerance: float = TOLERANCE) -> int:
    """The replicas the metric asks for; the current count while within the tolerance."""
    if current > 0 and abs(metric / (per_pod_target * current) - 1.0) <= tolerance:
        return current
    return int(math.ceil(metric / per_pod_target - 1e-9)) if metric > 0 else 0


def scale(current: int, recommendation: int, recent: tuple[int, ...], window_min: int, lo: int, hi: int,
          up_percent: float = UP_PERCENT, up_pods: int = UP_PODS) -> tuple[int, tuple[int, ...]]:
    """(replicas after one minute of syncs, the window's recommendations): up at most +100%/+4 pods
    per 15 s; down to the window's highest recommendation."""
    recent = (recent + (recommendation,))[-max(1, window_min):]
    want = max(lo, min(hi, recommendation))
    if want > current:
        n = current
        for _ in range(int(60 / SYNC_S)):
            n = min(want, max(math.ceil(n * (1 + up_percent / 100)), n + up_pods))
        return n, recent
    return min(current, max(lo, min(hi, max(recent)))), recent


def seeded(recommendation: int, current: int, started: bool) -> int:
    """Minute 0's recommendation as the window records it: Kubernetes seeds an HPA's scale-down window
    with the count it starts from (``recordInitialRecommendation``, stamped with the first sync), so
    a fresh HPA never scales down before its window has passed; an empty window let the simulator's
    baselines drop to ``min_replicas`` at their first minute, on every trace alike (issue 46)."""
    return recommendation if started else max(recommendation, current)


def follow(st: HPAState, current: int, observed_rpm: float, per_pod_target: float, window_min: int, lo: int,
           hi: int) -> HPAState:
    """One minute of the followed HPA on the load it reads (an unknown load: it holds)."""
    start = current if st.replicas < 0 else st.replicas
    if not math.isfinite(observed_rpm):
        return HPAState(start, st.recent)
    rec = seeded(recommend(start, max(0.0, observed_rpm), per_pod_target), start, st.replicas >= 0)
    n, recent = scale(start, rec, st.recent, window_min, lo, hi)
    return HPAState(n, recent)


def follow_hpa(cfg: ScalingConfig, st: HPAState, current: int, observed_rpm: float, cap: float) -> HPAState:
    """The replaced HPA's count after this minute (unchanged without a reactive guard)."""
    if cfg.reactive_guard is None:
        return st
    return follow(st, current, observed_rpm, cap * cfg.reactive_guard, cfg.reactive_guard_window_min,
                  cfg.min_replicas, cfg.max_replicas)
