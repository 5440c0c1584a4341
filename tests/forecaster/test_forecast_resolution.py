"""Series keep their resolution (issue 11): the forecaster works in a coarse series' own bins
(a 30-minute horizon is 6 steps at 5 minutes, a day 288 steps) and never reads a bin before it ends."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.backtest import run_backtest, summary, write_outputs
from forecaster.base import DAY, WEEK
from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier
from forecaster.live import TrainReport, train_deployment
from forecaster.lstm import LSTMConfig, LSTMForecaster
from forecaster.registry import Registry
from warmcast.resolution import with_resolution


def five_minute_frame(days=9, start="2024-03-04", noise=20.0, seed=0) -> pd.DataFrame:
    """Requests per 5 minutes (an ELB-like export): a daily cycle around 3,000 per bin."""
    t = pd.date_range(start, periods=days * 288, freq="5min", name="time")
    daily = 1 + 0.7 * np.sin(2 * np.pi * (t.hour * 60 + t.minute) / 1440)
    v = 3000 * daily + np.random.default_rng(seed).normal(0, noise, len(t))
    return with_resolution(pd.DataFrame({"requests": np.round(v)}, index=t), 5)


def test_baselines_forecast_five_minute_bins():
    frame = five_minute_frame(days=3, noise=0.0)
    train = frame.iloc[:-6]
    f = SeasonalNaive(DAY).fit(train).predict(train, horizon=6)
    assert f.step_min == 5 and f.origin == train.index[-1] + pd.Timedelta(minutes=5)
    assert list(f.index) == list(frame.index[-6:])
    np.testing.assert_allclose(f.mean, frame["requests"].iloc[-6:].to_numpy())  # one day = 288 bins back
    hw = HoltWinters(max_days=2)
    for model in (Persistence(), hw, UCFourier(max_days=2, maxiter=10)):
        g = model.fit(train).predict(train, horizon=6)
        assert g.step_min == 5 and g.origin == f.origin and np.isfinite(g.mean).all()
    assert hw.day == 288 and hw.seasonal  # two days of 5-minute bins are a seasonal fit


def test_backtest_on_five_minutes_counts_leads_in_bins_and_never_reads_an_unended_bin(tmp_path):
    frame = five_minute_frame(days=3)
    test_start = pd.Timestamp("2024-03-06 00:02")  # inside a bin: the first origin is the next boundary
    res = run_backtest(frame, test_start, [Persistence()], horizon=6, step=10, progress=False)
    assert res.step_min == 5 and res.metrics["resolution_min"] == 5
    assert res.origins[0] == pd.Timestamp("2024-03-06 00:05") and (res.origins.minute % 5 == 0).all()
    # persistence at each origin is the bin that ended at that origin, never a later one
    first = res.preds["persistence"][0, :, 1]
    np.testing.assert_allclose(first, frame["requests"].at[pd.Timestamp("2024-03-06 00:00")])
    assert "series resolution 5 min" in summary(res.metrics)
    with pytest.raises(ValueError, match="multiple of 5"):
        run_backtest(frame, test_start, [Persistence()], horizon=6, step=7, progress=False)
    paths = write_outputs(res, tmp_path)
    fc = pd.read_csv(paths["forecasts"])
    assert fc["target"].iloc[1] == "2024-03-06 00:10:00"  # lead 2 of the 00:05 origin: the 00:10 bin


def test_lstm_trains_and_forecasts_in_five_minute_steps():
    frame = five_minute_frame(days=9)
    cfg = LSTMConfig.tiny(epochs=1, horizon=6, window=24, level_window=6, max_origins=400, refit_full=False)
    model = LSTMForecaster(cfg, progress=False).fit(frame.iloc[:-12])
    assert model.cfg.step_min == 5
    f = model.predict(frame.iloc[:-12], horizon=6)
    assert f.step_min == 5 and f.origin == frame.index[-12] and np.isfinite(f.mean).all()
    assert 1000 < f.mean.mean() < 8000  # bins of ~3,000 requests, not minutes of ~600
    # the features read a day back as 288 bins: a model fitted per minute refuses a 5-minute history
    with pytest.raises(ValueError, match="5-minute bins"):
        LSTMForecaster(cfg, progress=False).fit(_minutes(days=2)).predict(frame, horizon=6)


def _minutes(days: int) -> pd.DataFrame:
    t = pd.date_range("2024-03-01", periods=days * DAY, freq="min", name="time")
    return pd.DataFrame({"requests": 600 + 300 * np.sin(2 * np.pi * np.arange(len(t)) / DAY)}, index=t)


def test_train_on_a_five_minute_series_reports_its_resolution(tmp_path):
    frame = five_minute_frame(days=4)
    rep = train_deployment(frame, Registry(tmp_path), "elb", val_hours=6,
                           config=LSTMConfig.tiny(epochs=1, horizon=6, window=24, level_window=6,
                                                  max_origins=400, refit_full=False),
                           progress=False, baselines=[Persistence(), SeasonalNaive(DAY)])
    text = rep.summary()
    assert rep.resolution_min == 5 and "series resolution 5 min" in text
    assert set(rep.maes) == {"lstm", "persistence", "seasonal_naive_day"}


def test_train_report_with_a_model_without_finite_forecast_prints():
    rep = TrainReport("d", "v1", None, ("a", "b"), {"lstm": None, "persistence": 3.0})
    text = rep.summary()  # was TypeError: unsupported format string passed to NoneType.__format__
    assert "lstm" in text and "no finite forecast" in text
    assert text.index("persistence") < text.index("lstm")


def test_week_period_in_five_minute_steps():
    frame = five_minute_frame(days=8, noise=0.0)
    f = SeasonalNaive(WEEK).fit(frame.iloc[:-6]).predict(frame.iloc[:-6], horizon=6)
    np.testing.assert_allclose(f.mean, frame["requests"].iloc[-6 - 2016:-2016].to_numpy())
