"""Fallback paths: short history, missing, stale and failing models."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.base import DAY

from warmcast.forecast import Forecast
from forecaster.baselines import Persistence, SeasonalNaive
from forecaster.fallback import FallbackForecaster
from forecaster.lstm import LSTMConfig, LSTMForecaster

from fc_synth import synth_frame

FRAME = synth_frame(3, seed=4)


def CHEAP():
    return [Persistence(), SeasonalNaive(DAY)]


@pytest.fixture(scope="module")
def lstm():
    return LSTMForecaster(LSTMConfig.tiny(), progress=False).fit(FRAME.iloc[: 2 * DAY])


def test_primary_answers_when_it_can(lstm):
    f = FallbackForecaster(lstm).predict(FRAME)
    assert f.model == "lstm" and f.note == ""


def test_less_than_a_day_of_history(lstm):
    f = FallbackForecaster(lstm).predict(FRAME.iloc[:300])
    assert f.model == "uc_fourier"  # the preferred baseline when nothing was ranked
    assert "less than a day of history" in f.note and f.note.startswith(f"fallback to {f.model}")
    assert np.isfinite(f.mean).all() and f.horizon == 30


def test_missing_model_uses_best_baseline():
    fb = FallbackForecaster(None, [Persistence(), SeasonalNaive(DAY)], primary_missing_reason="no trained model")
    fb.fit(FRAME)
    f = fb.predict(FRAME)
    assert f.model in {"persistence", "seasonal_naive_day"}
    assert "no trained model" in f.note
    # the ranking picked the baseline with the lower recent MAE
    assert fb._ranking and f.model == min(fb._ranking, key=fb._ranking.get)


def test_stale_model(lstm):
    later = synth_frame(2, seed=9, start="2024-05-01")
    f = FallbackForecaster(lstm, CHEAP(), max_age=pd.Timedelta(days=14)).predict(later)
    assert f.model != "lstm" and "stale" in f.note


class Broken:
    name, version, meta = "broken", "1", {}

    def fit(self, history):
        return self

    def predict(self, history, horizon=30, quantiles=(0.1, 0.5, 0.9)):
        raise RuntimeError("boom")


class NaNModel(Broken):
    def predict(self, history, horizon=30, quantiles=(0.1, 0.5, 0.9)):
        nan = np.full(horizon, np.nan)
        return Forecast(history.index[-1], nan, {q: nan for q in quantiles}, "nan")


@pytest.mark.parametrize("bad, words", [(Broken(), "model failed (RuntimeError: boom)"),
                                        (NaNModel(), "non-finite")])
def test_failing_model(bad, words):
    f = FallbackForecaster(bad, CHEAP()).predict(FRAME)
    assert f.model not in ("broken", "nan") and words in f.note


def test_last_resort_persistence():
    class Never(Persistence):
        name = "never"

        def predict(self, *a, **k):
            raise ValueError("cannot")

    f = FallbackForecaster(None, [Never()]).predict(FRAME.iloc[:50])
    assert f.model == "persistence" and "fallback to persistence" in f.note
