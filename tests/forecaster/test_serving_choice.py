"""Issue 46 item 1: after `train`, the model that answers is the best one the training's backtest found,
the note says which and why, and no level a serving baseline gives runs away from the load seen.

A challenger that was not promoted left v0001 behind: `forecast` then said "no trained model" and
served seasonal_naive_day, the worst model of the very table that refused the challenger."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.base import CEILING, DAY, WEEK
from forecaster.baselines import Persistence, SeasonalNaive
from forecaster.fallback import FallbackForecaster
from forecaster.live import forecast_deployment, train_deployment
from forecaster.lstm import LSTMConfig
from forecaster.registry import Registry
from forecaster.resolver import resolve

from warmcast.resolution import with_resolution


def random_walk(days: float = 2.2, seed: int = 3) -> pd.DataFrame:
    """A load whose next value is its last one plus noise: persistence is the best forecast there is,
    seasonal naive (yesterday's value) by far the worst."""
    n = int(days * 1440)
    y = np.maximum(50, 300 + np.cumsum(np.random.default_rng(seed).normal(0, 8, n))).round()
    return pd.DataFrame({"requests": y}, index=pd.date_range("2024-03-04", periods=n, freq="min", name="time"))


def test_a_challenger_not_promoted_leaves_the_best_baseline_of_its_table_serving(tmp_path):
    frame, reg = random_walk(), Registry(tmp_path)
    rep = train_deployment(frame, reg, "chat", val_hours=4, config=LSTMConfig.tiny(epochs=4), progress=False,
                           baselines=[Persistence(), SeasonalNaive(DAY)])
    assert rep.version == "v0001" and not rep.decision.promoted  # the situation of the issue
    best = min((k for k in rep.maes if not k.startswith("lstm")), key=rep.maes.get)
    assert best == "persistence" and rep.maes["seasonal_naive_day"] > rep.maes["persistence"]

    r = resolve(reg, "chat", frame)
    assert r.source == "validation" and r.baselines[0] == best
    f = forecast_deployment(frame, reg, "chat")
    assert f.model == best, f.note
    assert "no trained model" not in f.note
    assert "chat/v0001 was not promoted" in f.note and rep.decision.reason in f.note
    assert f"{best} answers" in f.note


def test_the_table_is_kept_with_the_registry(tmp_path):
    frame, reg = random_walk(), Registry(tmp_path)
    rep = train_deployment(frame, reg, "chat", val_hours=4, config=LSTMConfig.tiny(epochs=4), progress=False,
                           baselines=[Persistence(), SeasonalNaive(DAY)])
    trained = reg.last_trained("chat")
    assert trained["version"] == "v0001"
    assert trained["decision"] == {"promoted": rep.decision.promoted, "reason": rep.decision.reason}
    assert trained["validation"]["persistence"]["mae"] == pytest.approx(rep.maes["persistence"])


def nasa_5min(path, end: str) -> pd.DataFrame:
    minutes = pd.read_csv(path, parse_dates=["time"]).set_index("time")["requests"]
    bins = minutes.resample("5min").sum(min_count=1).loc[:end].iloc[-WEEK // 5:]  # the week the API reads
    return with_resolution(bins.to_frame("requests"), 5)


def test_a_serving_baseline_stays_under_the_ceiling_of_the_weeks_peak(shared_data):
    """NASA's log in 5-minute bins up to the day after its August outage: seasonal naive's bands, the
    quantiles of its own log errors, include the outage's edges, and its P99 was 34,502 requests per
    5 minutes where the week's largest bin is 534 (65x). The LSTM's ceiling (CEILING x the week's peak)
    now bounds every serving answer."""
    frame = nasa_5min(shared_data / "nasa_http_1995_per_minute.csv", end="1995-08-05")
    fb = FallbackForecaster(None, baselines=[SeasonalNaive(DAY)]).fit(frame)
    f = fb.predict(frame, horizon=6, quantiles=(0.5, 0.9, 0.99))
    assert f.model == "seasonal_naive_day"
    top = float(np.nanmax(frame["requests"]))
    for q, path in f.quantiles.items():
        assert path.max() <= CEILING * top + 1e-6, (q, path.max(), top)
    assert f.quantiles[0.5].max() < 2 * top  # the point is left as it was
