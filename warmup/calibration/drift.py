"""Keeping a calibration true: observed P99 TTFT at the observed load against the curve's prediction.

As NVIDIA Dynamo's SLA planner does, the ratio observed / predicted is a correction factor,
smoothed over readings (an exponential moving average, so one noisy scrape does not flag);
a factor more than ``threshold`` (15%) from 1 flags drift: the instance no longer serves what
it was calibrated to serve (a new engine version, another GPU, a changed request mix), and
the calibration should be run again.  Pure: the worker hook (``workers/drift.py``)
reads the signals and the stored calibration and records what this returns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

DRIFT_THRESHOLD = 0.15
SMOOTHING = 0.3     # weight of the newest reading in the moving average


def curve_of(doc: dict[str, Any]) -> tuple[tuple[float, float], ...]:
    """(rate req/s, TTFT P99 ms) of the passing steps of a calibration's capacity scenario, by rate."""
    scen = doc.get("scenarios", {}).get(doc.get("capacity", {}).get("scenario", ""), {})
    pts = [(float(p["rate_rps"]), float(p["ttft_ms"]["p99"])) for p in scen.get("curve", ())
           if p.get("passed") and p.get("ttft_ms", {}).get("p99") is not None]
    return tuple(sorted(pts))


def predicted_p99_ms(curve: Sequence[tuple[float, float]], rate_rps: float) -> Optional[float]:
    """The curve's TTFT P99 at ``rate_rps``: linear between measured rates, the lowest point's value
    below them (latency is flat at light load); None above the highest (no measurement there)."""
    if not curve or not math.isfinite(rate_rps) or rate_rps > curve[-1][0]:
        return None
    if rate_rps <= curve[0][0]:
        return curve[0][1]
    for (r0, v0), (r1, v1) in zip(curve, curve[1:]):
        if r0 <= rate_rps <= r1:
            return v0 + (v1 - v0) * (rate_rps - r0) / (r1 - r0) if r1 > r0 else v1
    return None


@dataclass(frozen=True, slots=True)
class DriftCheck:
    factor: Optional[float]     # smoothed observed / predicted (None: nothing to compare yet)
    drifted: bool
    reason: str


def check_drift(curve: Sequence[tuple[float, float]], per_instance_rps: float, observed_p99_ms: Optional[float],
                previous_factor: Optional[float], threshold: float = DRIFT_THRESHOLD,
                smoothing: float = SMOOTHING) -> DriftCheck:
    """Fold one reading into the correction factor and say whether it is off by more than ``threshold``."""
    keep = DriftCheck(previous_factor, _off(previous_factor, threshold), "")
    if observed_p99_ms is None or not math.isfinite(observed_p99_ms) or not math.isfinite(per_instance_rps):
        return DriftCheck(keep.factor, keep.drifted, "no P99 or load reading: factor unchanged")
    predicted = predicted_p99_ms(curve, per_instance_rps)
    if predicted is None or predicted <= 0:
        return DriftCheck(keep.factor, keep.drifted, f"{per_instance_rps:.3g} req/s per instance is outside the "
                                                     "calibrated curve: factor unchanged")
    ratio = observed_p99_ms / predicted
    factor = ratio if previous_factor is None else smoothing * ratio + (1 - smoothing) * previous_factor
    drifted = _off(factor, threshold)
    why = (f"observed TTFT P99 {observed_p99_ms:.4g} ms at {per_instance_rps:.3g} req/s per instance vs "
           f"{predicted:.4g} ms calibrated: factor {factor:.3f}")
    return DriftCheck(factor, drifted, why + (f", drift over {threshold:.0%}: recalibrate" if drifted
                                              else f", within {threshold:.0%}"))


def _off(factor: Optional[float], threshold: float) -> bool:
    return factor is not None and abs(factor - 1.0) > threshold
