"""TTFT P99 per simulated minute from a calibration's latency curve, and SLO attainment (issue 15).

The fleet model counts a request late when it waits in the fleet's queue; the calibration also
measured how slow one instance answers at each offered rate below its capacity.  Each minute,
the curve is read at the minute's load per ready instance (linear between measured rates; the
lowest point's value below them); a load above the curve's last measured rate (the calibrated
capacity) has no measurement and counts as over the SLO.  A minute in which the fleet's queue
made requests wait adds that wait (the longest one, so the estimate errs high): the curve is
one instance at a steady rate and knows nothing of a backlog the fleet carries.

Attainment is a share of *minutes*: of the minutes with requests, those whose estimated TTFT
P99 is within the bound (``slo_attainment``); the share of requests that arrived in such
minutes is given beside it (``slo_attainment_requests``).  Pure: the CLI reads the files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from warmup.calibration.drift import predicted_p99_ms

BASIS = ("share of minutes with requests whose estimated TTFT P99 (calibrated curve at the load per ready "
         "instance, plus any fleet queue wait) is within the bound")


@dataclass(frozen=True)
class LatencyCurve:
    points: tuple[tuple[float, float], ...]   # (req/s per instance, TTFT P99 ms), ascending rate
    capacity_rps: float                        # the calibrated capacity; the curve ends there
    bound_ms: float                            # the SLO's TTFT P99 bound
    bound_source: str                          # where the bound comes from, for the report
    profile: Optional[str] = None              # the profile the calibration measured
    scenario: str = ""
    shape: tuple[tuple[float, float], ...] = ()  # (TTFT P50, P95 ms) at each point's rate, where measured

    def describe(self) -> dict[str, Any]:
        return {"profile": self.profile, "scenario": self.scenario, "capacity_rps": self.capacity_rps,
                "bound_ms": self.bound_ms, "bound_source": self.bound_source,
                "points": [list(p) for p in self.points], "slo_attainment": BASIS}


def ttft_bound(doc: Mapping[str, Any], deployment_slo: Any = None) -> tuple[float, str]:
    """(TTFT P99 bound in ms, its source): the deployment's SLO, else the one the calibration was
    measured against, else the late wait of either (as the calibration's own plot does)."""
    cal = doc.get("slo") or {}
    if deployment_slo is not None and deployment_slo.ttft_p99_ms is not None:
        return float(deployment_slo.ttft_p99_ms), "the deployment's slo.ttft_p99_ms"
    if cal.get("ttft_p99_ms") is not None:
        return float(cal["ttft_p99_ms"]), "the calibration's slo.ttft_p99_ms"
    if deployment_slo is not None:
        return float(deployment_slo.late_wait_s) * 1000.0, "the deployment's slo.late_wait_s (no TTFT bound set)"
    return float(cal.get("late_wait_s", 5.0)) * 1000.0, "the calibration's slo.late_wait_s (no TTFT bound set)"


def curve_from_calibration(doc: Mapping[str, Any], bound_ms: float, bound_source: str) -> LatencyCurve:
    """The capacity scenario's passing steps at or below the calibrated capacity (a pass above it lies
    above a failure, which the search does not trust either); a rate measured twice keeps its higher P99."""
    cap = doc.get("capacity") or {}
    name = cap.get("scenario", "")
    curve = ((doc.get("scenarios") or {}).get(name) or {}).get("curve") or ()
    rps = float(cap.get("rps") or float(cap["rpm"]) / 60.0)
    worst: dict[float, tuple[float, float, float]] = {}
    for p in curve:
        q = p.get("ttft_ms") or {}
        if p.get("passed") and q.get("p99") is not None and float(p["rate_rps"]) <= rps + 1e-9:
            r, p99 = float(p["rate_rps"]), float(q["p99"])
            if r not in worst or p99 > worst[r][2]:
                worst[r] = (float(q.get("p50") or p99), float(q.get("p95") or p99), p99)
    if not worst:
        raise ValueError(f"the calibration's scenario {name!r} has no passing step with a TTFT P99")
    rates = sorted(worst)
    return LatencyCurve(tuple((r, worst[r][2]) for r in rates), rps, bound_ms, bound_source, doc.get("profile"), name,
                        shape=tuple(worst[r][:2] for r in rates))


def estimate_ttft_p99_ms(curve: LatencyCurve, demand: np.ndarray, ready_capacity_rpm: np.ndarray,
                         wait_s: np.ndarray) -> np.ndarray:
    """Per minute: estimated TTFT P99 (ms; inf where the load is past the curve or nothing is ready).

    The load per ready instance is read in the curve's terms: the minute's arrivals over the ready
    capacity, times the calibrated capacity.  With every ready instance of the calibrated profile
    that is the arrivals per ready instance; an instance of another profile is taken at the same
    share of its own capacity (the curve is the one measurement there is).
    """
    demand = np.asarray(demand, float)
    cap = np.asarray(ready_capacity_rpm, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(demand > 0, demand / cap * curve.capacity_rps, 0.0)
    out = np.empty(len(demand))
    for t, r in enumerate(rate.tolist()):
        v = predicted_p99_ms(curve.points, r)
        out[t] = math.inf if v is None else v
    return out + 1000.0 * np.nan_to_num(np.asarray(wait_s, float), nan=math.inf, posinf=math.inf)


def slo_attainment(estimate_ms: np.ndarray, demand: np.ndarray, bound_ms: float) -> dict[str, Any]:
    """The report's columns: attainment by minutes (with requests) and by requests, minutes over."""
    demand = np.asarray(demand, float)
    busy = demand > 0
    within = np.asarray(estimate_ms) <= bound_ms
    minutes, total = int(busy.sum()), float(demand.sum())
    return {"slo_attainment": round(float((within & busy).sum()) / minutes, 6) if minutes else None,
            "slo_attainment_requests": round(float(demand[within].sum()) / total, 6) if total > 0 else None,
            "slo_minutes_over": int((~within & busy).sum())}


def share_slower_than(p50: float, p95: float, p99: float, wait_ms: float) -> float:
    """The share of requests whose TTFT exceeds ``wait_ms``, from three measured percentiles: the
    survival is log-linear between them (1 at 0 ms, 0.5 at P50, 0.05 at P95, 0.01 at P99), and past
    P99 it keeps the P95-to-P99 decay (a stated model: the calibration measures no more of the tail)."""
    knots = ((0.0, 1.0), (p50, 0.5), (p95, 0.05), (p99, 0.01))
    for (x0, s0), (x1, s1) in zip(knots, knots[1:]):
        if wait_ms < x1:
            f = (wait_ms - x0) / (x1 - x0) if x1 > x0 else 1.0
            return float(math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0))))
    return 0.01 * 0.2 ** ((wait_ms - p99) / (p99 - p95)) if p99 > p95 else 0.0


def percentiles_ms(curve: LatencyCurve, rps: float) -> tuple[float, float, float]:
    """(P50, P95, P99) in ms of one replica of the curve's profile at ``rps`` requests/s (past the
    curve's last rate, its last point; without a measured shape, the P99 for all three)."""
    rates = [r for r, _ in curve.points]
    r = min(max(rps, 0.0), rates[-1])
    p99 = predicted_p99_ms(curve.points, r)
    p99 = float(curve.points[-1][1] if p99 is None else p99)
    if not curve.shape:
        return p99, p99, p99
    return (float(np.interp(r, rates, [s[0] for s in curve.shape])),
            float(np.interp(r, rates, [s[1] for s in curve.shape])), p99)


def late_below_saturation(curve: LatencyCurve, demand: np.ndarray, ready_capacity_rpm: np.ndarray,
                          queue_late: np.ndarray, wait_s: float) -> np.ndarray:
    """Per minute: the requests the queue did not already make late whose TTFT, read from the curve at
    the minute's load per ready instance, still exceeds ``wait_s`` (past the curve's last rate its last
    point: the queue counts the overload itself)."""
    if not curve.shape:
        return np.zeros(len(demand))
    demand = np.asarray(demand, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(demand > 0, demand / np.asarray(ready_capacity_rpm, float) * curve.capacity_rps, 0.0)
    out = np.zeros(len(demand))
    for t in np.flatnonzero(demand > 0):
        p50, p95, p99 = percentiles_ms(curve, float(rate[t]) if math.isfinite(rate[t]) else math.inf)
        out[t] = max(0.0, demand[t] - queue_late[t]) * share_slower_than(p50, p95, p99, 1000.0 * wait_s)
    return out


# A replica's TTFT with no calibration (issue 42): a documented default that rises with utilisation (the
# offered rate over the profile's declared capacity), so a fleet without calibrations still has a P99
# for the switch's breaker and lateness below saturation.  Its P99 is 300 ms at light load, doubles by
# full load and climbs steeply past it, as a saturated queue does; P50 and P95 are a third and two thirds
# of it.  A stated model, not a measurement: a calibration replaces it profile by profile.
DEFAULT_BASE_MS = 300.0
DEFAULT_RISE = ((0.1, 1.0), (0.5, 1.1), (0.8, 1.4), (0.9, 1.8), (1.0, 2.5), (1.2, 5.0), (1.5, 10.0),
                (2.0, 20.0), (3.0, 40.0))   # (utilisation, P99 over the base)


def default_curve(capacity_rpm: float, bound_ms: float, profile: Optional[str] = None) -> LatencyCurve:
    """The default curve of a replica of ``capacity_rpm`` (declared), read like a calibrated one."""
    rps = capacity_rpm / 60.0
    pts = tuple((u * rps, DEFAULT_BASE_MS * f) for u, f in DEFAULT_RISE)
    return LatencyCurve(pts, pts[-1][0], bound_ms, "default curve (no calibration)", profile, "default",
                        shape=tuple((p99 / 3.0, 2.0 * p99 / 3.0) for _, p99 in pts))


def with_default_curves(curves: Mapping[str, LatencyCurve], capacities: Mapping[str, float],
                        bound_ms: float) -> dict[str, LatencyCurve]:
    """``curves`` (calibrated) with the default curve for every profile of ``capacities`` that has none."""
    return {p: curves.get(p) or default_curve(c, bound_ms, p) for p, c in capacities.items()} | dict(curves)
