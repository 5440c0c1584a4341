"""The forecast backtest names leads by the minutes they really end at (issue 46 item 9): on a
10-minute series the table shows MAE@10/@20/@30 (it showed MAE@15 equal to MAE@1, both the first
bin) and the sample day's title says '10-20 min ahead' (it said '20-20')."""
from __future__ import annotations

import numpy as np

from forecaster.backtest import ahead
from forecaster.backtest_table import table


def metrics(resolution: int, by_lead: list[float]) -> dict:
    row = {"mae": float(np.mean(by_lead)), "mae_by_lead": by_lead, "wape": 0.1, "mase_seasonal_naive": 0.9,
           "coverage_p10_p90": 0.8, "coverage_p90": 0.9, "coverage_by_level": {"p95": 0.95, "p99": 0.99},
           "pinball": 1.0, "fit_seconds": 0.1, "predict_ms_per_forecast": 0.2}
    return {"resolution_min": resolution, "models": {"uc": row}, "skipped": {"lstm": "too little history"}}


def test_a_ten_minute_series_shows_each_bin_once_under_the_minute_it_ends():
    head, uc, skipped = table(metrics(10, [11.0, 22.0, 33.0])).splitlines()
    assert head.split()[1:5] == ["MAE", "MAE@10", "MAE@20", "MAE@30"]
    assert uc.split()[2:5] == ["11.0", "22.0", "33.0"]
    assert "MAE@15" not in head and "skipped" in skipped


def test_a_per_minute_series_keeps_mae_at_1_15_and_30():
    by_lead = [float(k) for k in range(1, 31)]
    head, uc, _ = table(metrics(1, by_lead)).splitlines()
    assert head.split()[2:5] == ["MAE@1", "MAE@15", "MAE@30"]
    assert uc.split()[2:5] == ["1.0", "15.0", "30.0"]


def test_the_sample_day_title_names_the_bin_it_draws():
    assert ahead(np.array([1]), 10) == "10-20 min ahead"
    assert ahead(np.arange(10, 20), 1) == "10-20 min ahead"
