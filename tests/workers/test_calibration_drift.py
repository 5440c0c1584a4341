"""Online correction of a calibration: observed P99 at observed load vs the calibrated curve."""
from __future__ import annotations

import math

import pytest

from warmup.calibration.store import CalibrationStore
from warmup.calibration.drift import check_drift, curve_of, predicted_p99_ms
from workers import drift

DOC = {"capacity": {"rpm": 120.0, "scenario": "short"},
       "scenarios": {"short": {"curve": [
           {"rate_rps": 0.5, "passed": True, "ttft_ms": {"p99": 100.0}},
           {"rate_rps": 1.5, "passed": True, "ttft_ms": {"p99": 200.0}},
           {"rate_rps": 2.0, "passed": True, "ttft_ms": {"p99": 400.0}},
           {"rate_rps": 3.0, "passed": False, "ttft_ms": {"p99": 9000.0}}]}}}


def test_prediction_interpolates_the_passing_curve_only():
    curve = curve_of(DOC)
    assert curve == ((0.5, 100.0), (1.5, 200.0), (2.0, 400.0))
    assert predicted_p99_ms(curve, 0.1) == 100.0 and predicted_p99_ms(curve, 1.0) == pytest.approx(150.0)
    assert predicted_p99_ms(curve, 2.5) is None  # beyond the highest passing rate: not measured


def test_drift_is_flagged_past_15_percent_after_smoothing():
    curve = curve_of(DOC)
    ok = check_drift(curve, 1.0, 160.0, None)              # 160 / 150
    assert ok.factor == pytest.approx(1.0667, abs=1e-3) and not ok.drifted and "within 15%" in ok.reason
    slow = check_drift(curve, 1.0, 200.0, ok.factor)       # one slow reading (1.33) moves the average only partly
    assert not slow.drifted and slow.factor == pytest.approx(0.3 * 200 / 150 + 0.7 * ok.factor)
    assert check_drift(curve, 1.0, 300.0, slow.factor).drifted
    assert check_drift(curve, 1.0, 100.0, None).drifted    # faster than calibrated is drift too (0.67)
    off = check_drift(curve, 2.5, 300.0, 1.3)
    assert off.factor == 1.3 and off.drifted and "outside the calibrated curve" in off.reason
    assert check_drift(curve, 1.0, None, None).factor is None


def test_worker_hook_stores_the_factor_and_audits_when_drift_starts(ctx):
    sig = {"ts": 1.0, "ready": 2, "observed_rpm": 120.0, "p99_s": 0.15}   # 1 req/s per instance, 150 ms
    assert drift.check(ctx, "simdep", sig) is None                         # no calibration: nothing to check
    CalibrationStore(ctx.r, ctx.prefix).put("simdep", "day", DOC)
    assert not drift.check(ctx, "simdep", sig).drifted
    assert ctx.state.get("calibration-drift", "simdep")["factor"] == pytest.approx(1.0)
    assert ctx.state.audit_log("simdep", kind="calibration") == []
    for _ in range(6):
        res = drift.check(ctx, "simdep", {**sig, "p99_s": 0.3})            # twice the calibrated P99
    assert res.drifted and res.factor > 1.15
    rows = ctx.state.audit_log("simdep", kind="calibration")
    assert len(rows) == 1 and rows[0]["decision"] == "drift" and "recalibrate" in rows[0]["reason"]
    from workers import metrics
    assert metrics.CALIBRATION_DRIFT.labels("simdep")._value.get() == 1
    assert math.isclose(metrics.CALIBRATION_FACTOR.labels("simdep")._value.get(), res.factor)
