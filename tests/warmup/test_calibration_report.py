"""The calibration's document and picture say how sure the answer is and why a step failed."""
from __future__ import annotations

import json

import matplotlib
import numpy as np

from warmcast.config.slo import SLO
from warmup.calibration import report
from warmup.calibration.evidence import assess
from warmup.calibration.runner import CalibrationPlan, ScenarioResult, curve_point, failed_on
from warmup.calibration.search import judge, scaled_scenarios
from warmup.calibration.steps import Record, schedule, step_stats

matplotlib.use("Agg")
SLO_1S = SLO(ttft_p99_ms=1000.0)
SHORT = scaled_scenarios(2048, ("short",))[0][0]


def _records(rate: float, seconds: float, ttft: float, failed: int = 0, seed: int = 0) -> list[Record]:
    arr = schedule(SHORT, rate, 0.0, seconds, np.random.default_rng(seed))
    return [Record(a, False, error="unfinished") if i < failed else Record(a, True, ttft, ttft + 300, 10, 32)
            for i, a in enumerate(arr)]


def _result() -> ScenarioResult:
    """4 req/s held over 320 requests in two steps; a 60-request step at 6 req/s failed on one error (a failed request
    is late too: one of 60 is surely over a 0.05% late share) with its P99 under the line; 8 req/s
    broke on its P99."""
    res = ScenarioResult(SHORT, 10.0, {"low": 1.0, "typical": 4.0, "peak": 10.0})
    for rate, seconds, ttft, failed in ((4.0, 80.0, 60.0, 0), (6.0, 10.0, 90.0, 1), (8.0, 10.0, 3000.0, 0)):
        recs = _records(rate, seconds, ttft, failed)
        st = step_stats("short", rate, seconds, recs, SLO_1S.late_wait_s)
        v = judge(st, SLO_1S)
        res.records[rate], res.windows[rate] = recs, seconds
        res.book[rate] = assess(rate, recs, SLO_1S, 0.95, "short", seconds, steps=2 if rate == 4.0 else 1)
        res.curve.append(curve_point(st, v.passed, v.reason, [], res.book[rate]))
    res.capacity_rps, res.tokens_per_s, res.reason = 4.0, 100.0, "capacity " + res.book[4.0].describe()
    return res


def test_the_document_carries_the_answers_uncertainty_and_each_rates_standing(tmp_path):
    res = _result()
    assert [res.book[r].standing.value for r in (4.0, 6.0, 8.0)] == ["held", "broke", "broke"]
    assert "late 1 of" in res.book[6.0].reason and "lower bound" in res.book[6.0].reason
    run = {"model": "tiny", "max_model_len": 2048, "scaling": scaled_scenarios(2048, ("short",))[1],
           "results": {"short": res}, "headline": res, "burst": None}
    doc = report.document(run, slo=SLO_1S, plan=CalibrationPlan(scenarios=("short",)), url="http://x", server={})
    cap = doc["capacity"]
    assert cap["rps"] == 4.0 and cap["requests"] >= 299 and cap["confidence"] == 0.95
    assert cap["ttft_p99_upper_ms"] == 60.0 and cap["lowest_broken_rps"] == 6.0
    assert doc["matrix"]["requests_to_resolve_p99"] == 299 and "upper bound" in doc["matrix"]["judged"]
    rates = doc["scenarios"]["short"]["rates"]
    assert [(r["rate_rps"], r["standing"]) for r in rates] == [(4.0, "held"), (6.0, "broke"), (8.0, "broke")]
    assert rates[1]["ttft_p99_upper_ms"] is None  # ~60 requests bound no P99 from above: null, not inf
    six = next(p for p in doc["scenarios"]["short"]["curve"] if p["rate_rps"] == 6.0)
    assert six["failed_on"] == ["errors", "late"] and six["rate_standing"] == "broke" and six["ttft_ms"]["p99"] < 1000
    js, png = report.write_files(doc, tmp_path)
    assert json.loads(js.read_text())["capacity"]["requests"] == cap["requests"] and png.stat().st_size > 10_000


def test_a_step_that_failed_under_the_line_is_drawn_with_the_bound_it_broke():
    import matplotlib.pyplot as plt
    res = _result()
    fig, ax = plt.subplots()
    report._mark_failed_steps(ax, sorted(res.curve, key=lambda p: p["rate_rps"]))
    assert [t.get_text() for t in ax.texts] == ["failed: errors, late"]  # 8 req/s failed on its P99: no label
    plt.close(fig)
    assert failed_on("errors 1.7% > 0.1%; TTFT P99 1200 ms > 1000 ms", False) == ["errors", "TTFT P99"]
    assert failed_on("errors 0% <= 0.1%", True) == []
