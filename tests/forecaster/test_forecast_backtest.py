"""Rolling backtest: outputs, metrics, and no leakage from after an origin."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from forecaster.backtest import forecasts_frame, run_backtest, write_outputs
from forecaster.base import DAY
from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier
from forecaster.lstm import LSTMConfig, LSTMForecaster

from fc_synth import synth_frame

FRAME = synth_frame(4, seed=5, gap=(4000, 4030))
FACTORIES = {
    "persistence": Persistence,
    "seasonal_naive_day": lambda: SeasonalNaive(DAY),
    "holt_winters": lambda: HoltWinters(max_days=3),
    "uc_fourier": lambda: UCFourier(max_days=2, maxiter=15),
    "lstm": lambda: LSTMForecaster(LSTMConfig.tiny(), progress=False),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_no_leakage(name):
    """Changing the data after an origin does not change that origin's forecast."""
    train_end = FRAME.index[3 * DAY]
    model = FACTORIES[name]().fit(FRAME.loc[FRAME.index < train_end])
    origins = FRAME.index[[3 * DAY + 20, 3 * DAY + 300, 3 * DAY + 700]]
    before = model.predict_origins(FRAME, origins)
    for o, f in zip(origins, before):
        changed = FRAME.copy()
        after = changed.index >= o
        changed.loc[after, "requests"] = changed.loc[after, "requests"] * 7 + 1000
        changed.loc[changed.index[-50:], "requests"] = np.nan
        g = model.predict_origins(changed, [o])[0]
        np.testing.assert_allclose(g.mean, f.mean, rtol=1e-6, err_msg=f"{name} leaks data after {o}")
        for q in (0.1, 0.9):
            np.testing.assert_allclose(g.quantiles[q], f.quantiles[q], rtol=1e-6)
    # and the batched backtest path sees the same: forecasts of an unchanged prefix are unchanged
    m2 = FACTORIES[name]().fit(FRAME.loc[FRAME.index < train_end])
    g_all = m2.predict_origins(FRAME.loc[FRAME.index < origins[1]], origins[:2])
    np.testing.assert_allclose(g_all[0].mean, before[0].mean, rtol=1e-6)


def test_backtest_outputs(tmp_path):
    frame = synth_frame(3, seed=2, gap=(3000, 3020))
    models = [Persistence(), SeasonalNaive(DAY), LSTMForecaster(LSTMConfig.tiny(), progress=False),
              SeasonalNaive(7 * DAY)]
    start = frame.index[2 * DAY + 600]
    res = run_backtest(frame, start, models, horizon=30, step=10, progress=False)
    paths = write_outputs(res, tmp_path)
    df = pd.read_csv(paths["forecasts"], dtype={"origin": str, "target": str})
    assert list(df.columns) == ["origin", "target", "model", "p10", "p50", "p90", "p95", "p99"]
    n_orig = len(res.origins)
    assert n_orig == len(pd.date_range(start, frame.index[-1] - pd.Timedelta(minutes=29), freq="10min"))
    assert len(df) == n_orig * 30 * 3  # the week naive is skipped: not enough history
    assert set(df.model) == {"persistence", "seasonal_naive_day", "lstm"}
    assert df.origin.iloc[0] == start.strftime("%Y-%m-%d %H:%M:%S")
    row = df[(df.model == "lstm")].iloc[29]
    assert pd.Timestamp(row.target) - pd.Timestamp(row.origin) == pd.Timedelta(minutes=29)
    assert (df.p10 <= df.p50 + 1e-9).all() and (df.p50 <= df.p90 + 1e-9).all()
    assert (df.p90 <= df.p95 + 1e-9).all() and (df.p95 <= df.p99 + 1e-9).all()
    m = json.loads(paths["metrics"].read_text())
    lstm = m["models"]["lstm"]
    for key in ("mae", "mae_by_lead", "mase_seasonal_naive", "mase_persistence", "wape", "coverage_p10_p90",
                "coverage_p90", "pinball", "fit_seconds", "predict_seconds"):
        assert key in lstm, key
    assert len(lstm["mae_by_lead"]) == 30
    assert "seasonal_naive_week" in m["skipped"]
    assert m["best_baseline"]["model"] in ("persistence", "seasonal_naive_day")
    # metrics agree with the csv
    p = df[df.model == "persistence"]
    act = frame["requests"].reindex(pd.to_datetime(p.target)).to_numpy()
    ok = np.isfinite(act)
    assert abs(np.abs(p.p50.to_numpy()[ok] - act[ok]).mean() - m["models"]["persistence"]["mae"]) < 1e-2
    # pinball loss and coverage at every provisioning level, from the same rows as the csv
    for col, q in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
        d = act[ok] - p[col].to_numpy()[ok]
        pin = np.maximum(q * d, (q - 1) * d).mean()
        assert abs(pin - m["models"]["persistence"]["pinball_by_level"][col]) < 1e-2, col
        qs = p[col].to_numpy()[ok]  # rounded to 3 decimals in the csv: a tie may fall either side
        lo, hi = (act[ok] < qs - 1e-3).mean(), (act[ok] <= qs + 1e-3).mean()
        assert lo - 1e-4 <= m["models"]["persistence"]["coverage_by_level"][col] <= hi + 1e-4, col
    # the LSTM's own calibration check on the training slice it held back, every level
    assert set(lstm["held_back"]) >= {"coverage_p90", "coverage_p95", "coverage_p99"}
    assert "held_back" not in m["models"]["persistence"]
    assert paths["plot"].stat().st_size > 10_000


def test_forecasts_frame_time_format():
    frame = synth_frame(2, seed=1)
    res = run_backtest(frame, frame.index[DAY + 30], [Persistence()], horizon=5, step=60, progress=False)
    df = forecasts_frame(res)
    assert df.origin.str.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$").all()
    assert df.target.str.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$").all()
