"""TTFT P99 per simulated minute from a calibration's latency curve, and SLO attainment (issue 15)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from warmcast.config.slo import SLO
from warmup.sim.fleet import FleetParams, run_plan, summarise
from warmup.sim.latency import (LatencyCurve, curve_from_calibration, estimate_ttft_p99_ms, share_slower_than,
                                slo_attainment, ttft_bound)


def _doc(**slo) -> dict:
    def step(rate, passed, p99):
        return {"rate_rps": rate, "passed": passed, "ttft_ms": {"p50": 10.0, "p95": 20.0, "p99": p99}}
    curve = [step(0.2, True, 100.0), step(0.5, True, 200.0), step(1.0, True, 380.0), step(1.0, True, 400.0),
             step(2.0, False, 5000.0), step(1.5, True, 450.0),     # a pass above the failure at 1.5 req/s
             step(1.25, False, 900.0), step(1.25, False, 950.0)]
    return {"profile": "night", "capacity": {"scenario": "mix", "rps": 1.0, "rpm": 60.0},
            "slo": {"late_wait_s": 5.0, "ttft_p99_ms": 500.0, **slo}, "scenarios": {"mix": {"curve": curve}}}


def test_the_curve_is_the_passing_steps_up_to_the_capacity():
    c = curve_from_calibration(_doc(), 300.0, "test")
    # failures and the pass above a failure are left out; 1.0 req/s measured twice keeps its higher P99
    assert c.points == ((0.2, 100.0), (0.5, 200.0), (1.0, 400.0))
    assert (c.capacity_rps, c.profile, c.scenario) == (1.0, "night", "mix")
    with pytest.raises(ValueError, match="no passing step"):
        curve_from_calibration({"capacity": {"rpm": 60.0, "scenario": "mix"}}, 300.0, "test")


def test_the_bound_is_the_deployments_then_the_calibrations():
    assert ttft_bound(_doc(), SLO(ttft_p99_ms=300)) == (300.0, "the deployment's slo.ttft_p99_ms")
    assert ttft_bound(_doc(), SLO()) == (500.0, "the calibration's slo.ttft_p99_ms")
    assert ttft_bound(_doc(ttft_p99_ms=None), SLO(late_wait_s=2))[0] == 2000.0


def test_each_minute_reads_the_curve_at_its_load_per_ready_instance():
    c = curve_from_calibration(_doc(), 300.0, "test")
    demand = np.array([30.0, 60.0, 90.0, 120.0, 150.0, 30.0, 0.0])
    ready_cap = np.array([120.0] * 5 + [0.0, 0.0])           # two ready instances of 60 req/min, then none
    est = estimate_ttft_p99_ms(c, demand, ready_cap, np.zeros(7))
    # 0.25 req/s per instance interpolates 100..200 ms; 1.0 is the last measured rate; 1.25 is past it;
    # requests with no instance ready are over too; a minute without requests reads the lowest point
    assert est[:4] == pytest.approx([100 + 100 * 0.05 / 0.3, 200.0, 300.0, 400.0])
    assert math.isinf(est[4]) and math.isinf(est[5]) and est[6] == 100.0
    waited = estimate_ttft_p99_ms(c, demand[:1], ready_cap[:1], np.array([0.5]))
    assert waited[0] == pytest.approx(est[0] + 500.0)        # a queue wait of 0.5 s adds to it
    att = slo_attainment(est, demand, 300.0)
    # 3 of the 6 minutes with requests are within 300 ms (the empty minute is not counted)
    assert att == {"slo_attainment": 0.5, "slo_attainment_requests": round(180 / 480, 6), "slo_minutes_over": 3}


def test_the_report_row_gives_attainment_beside_the_late_share():
    # the real fleet model: two instances of 60 req/min; minute 4 overloads them, and the backlog it
    # leaves is still draining in minute 5, at a load the curve alone would call fast
    c = LatencyCurve(((0.2, 100.0), (0.5, 200.0), (1.0, 400.0)), 1.0, 300.0, "test")
    demand = np.array([30.0, 60.0, 90.0, 120.0, 150.0, 30.0])
    run = run_plan("plan", np.full(6, 2), np.full(6, 2), demand[:, None], FleetParams(capacity_rpm=60.0))
    assert run.max_wait[5] > 1.0                             # minute 5 still drains minute 4's backlog
    row = summarise(run, demand, FleetParams(capacity_rpm=60.0), latency=c)
    keys = list(row)
    assert keys.index("slo_attainment") == keys.index("late_pct") + 1
    assert row["slo_attainment"] == pytest.approx(3 / 6) and row["slo_minutes_over"] == 3
    assert row["slo_attainment_requests"] == pytest.approx(180 / 480, abs=1e-6)
    assert "slo_attainment" not in summarise(run, demand, FleetParams(capacity_rpm=60.0))


def test_the_tail_model_passes_through_the_measured_percentiles():
    assert share_slower_than(100.0, 300.0, 600.0, 100.0) == pytest.approx(0.5)
    assert share_slower_than(100.0, 300.0, 600.0, 300.0) == pytest.approx(0.05)
    assert share_slower_than(100.0, 300.0, 600.0, 600.0) == pytest.approx(0.01)
    assert share_slower_than(100.0, 300.0, 600.0, 900.0) == pytest.approx(0.002)   # the P95->P99 decay again
    assert 0.05 < share_slower_than(100.0, 300.0, 600.0, 200.0) < 0.5


def test_requests_are_late_below_saturation_where_the_curve_says_so():
    # Issue 26: lateness used to exist only above 100% utilisation. Two instances of 60 req/min at
    # 90% load never queue, but the calibration measured a TTFT P99 of 8 s at that load: against a
    # 5 s wait about 2% of the requests are late (between the P95 and the P99).
    doc = {"profile": "p", "capacity": {"scenario": "s", "rps": 1.0},
           "scenarios": {"s": {"curve": [{"rate_rps": r, "passed": True, "ttft_ms": {"p50": 500.0 * r, "p95": 4000.0 * r,
                                                                                       "p99": 8000.0 * r}}
                                          for r in (0.5, 0.9, 1.0)]}}}
    c = curve_from_calibration(doc, 10_000.0, "test")
    demand = np.full(10, 108.0)                                   # 0.9 req/s per instance
    params = FleetParams(capacity_rpm=60.0, wait_threshold_s=5.0)
    run = run_plan("plan", np.full(10, 2), np.full(10, 2), demand[:, None], params)
    assert run.late.sum() == 0 and run.queue.max() == 0            # no queue: the old model's 0 late
    row = summarise(run, demand, params, latency=c)
    p95, p99 = 3600.0, 7200.0
    assert row["late_share"] == pytest.approx(share_slower_than(450.0, p95, p99, 5000.0))
    assert 0.01 < row["late_share"] < 0.05 and row["late_from_latency"] == pytest.approx(row["late_requests"])
    assert summarise(run, demand, params)["late_share"] == 0.0     # without a curve: the queue only
