"""One contract, every model: the LSTM, each baseline and the fallback wrapper.

``MODELS`` must name every model the CLI can run (``warmcast.cli.forecast.ALL_MODELS``): a model
added there without an entry here fails ``test_every_model_is_under_contract``."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.base import DAY, WEEK, ForecastModel

from warmcast.forecast import DEFAULT_QUANTILES, Forecast
from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier
from forecaster.fallback import FallbackForecaster
from forecaster.lstm import LSTMConfig, LSTMForecaster

from fc_synth import synth_frame

MODELS = {
    "persistence": lambda: Persistence(),
    "seasonal_naive_day": lambda: SeasonalNaive(DAY),
    "seasonal_naive_week": lambda: SeasonalNaive(WEEK),
    "holt_winters": lambda: HoltWinters(max_days=3),
    "uc_fourier": lambda: UCFourier(max_days=2, maxiter=15),
    "lstm": lambda: LSTMForecaster(LSTMConfig.tiny(), progress=False),
    "lstm_no_recurrent": lambda: LSTMForecaster(LSTMConfig.tiny(recurrent=False), progress=False),  # the ablation
    "fallback": lambda: FallbackForecaster(None, [Persistence(), SeasonalNaive(DAY)]),
}

HISTORY = synth_frame(8, seed=3, gap=(9000, 9060))  # 8 days with an hour-long outage


@pytest.fixture(scope="module", params=list(MODELS))
def fitted(request):
    model = MODELS[request.param]()
    out = model.fit(HISTORY)
    assert out is model, "fit returns the model"
    return model


def _check(f: Forecast, origin, horizon, levels=(0.1, 0.5, 0.9)):
    assert isinstance(f, Forecast)
    assert f.origin == origin
    assert f.horizon == horizon and len(f.mean) == horizon
    assert np.isfinite(f.mean).all() and (f.mean >= 0).all()
    for q in levels:
        assert q in f.quantiles, f"missing level {q}"
        assert len(f.quantiles[q]) == horizon
        assert np.isfinite(f.quantiles[q]).all()
    stack = np.vstack([f.quantiles[q] for q in sorted(f.quantiles)])
    assert (np.diff(stack, axis=0) >= -1e-9).all(), "quantiles cross"
    assert isinstance(f.model, str) and f.model
    assert isinstance(f.version, str)


def test_every_model_is_under_contract():
    from warmcast.cli.forecast import ALL_MODELS

    assert set(ALL_MODELS) <= set(MODELS), f"models without a contract test: {set(ALL_MODELS) - set(MODELS)}"


def test_every_provisioning_level_by_default(fitted):
    """P10, P50, P90, P95 and P99: every level a policy may provision for."""
    f = fitted.predict(HISTORY)
    _check(f, HISTORY.index[-1] + pd.Timedelta(minutes=1), 30, levels=DEFAULT_QUANTILES)
    assert f.quantiles[0.99].mean() > f.quantiles[0.9].mean(), "P99 lies above P90"


def test_levels_it_cannot_produce_are_refused(fitted):
    """A model that declares its trained levels refuses any outside them; the rest answer any level."""
    if fitted.levels is None:
        f = fitted.predict(HISTORY, quantiles=(0.05, 0.5, 0.975))
        assert set(f.quantiles) >= {0.05, 0.975}
    else:
        with pytest.raises(ValueError):
            fitted.predict(HISTORY, quantiles=(0.05, 0.5))


def test_protocol_attributes(fitted):
    assert isinstance(fitted, ForecastModel)
    assert isinstance(fitted.name, str) and fitted.name
    assert isinstance(fitted.version, str)


def test_predict_default_horizon(fitted):
    f = fitted.predict(HISTORY)
    _check(f, HISTORY.index[-1] + pd.Timedelta(minutes=1), 30)
    assert f.quantiles[0.1].mean() < f.quantiles[0.9].mean(), "the band has width"


def test_predict_shorter_horizon_other_levels(fitted):
    levels = (0.05, 0.5, 0.95) if fitted.levels is None else (0.5, 0.95)
    f = fitted.predict(HISTORY.iloc[:-100], horizon=12, quantiles=levels)
    _check(f, HISTORY.index[-100], 12, levels=levels)


def test_predict_series_input_and_nan_tail(fitted):
    s = HISTORY["requests"].copy()
    s.iloc[-3:] = np.nan  # the last minutes missing
    f = fitted.predict(s)
    _check(f, s.index[-1] + pd.Timedelta(minutes=1), 30)


def test_predict_is_deterministic(fitted):
    h = HISTORY.iloc[:-500]
    a, b = fitted.predict(h), fitted.predict(h)
    np.testing.assert_allclose(a.mean, b.mean)
    np.testing.assert_allclose(a.quantiles[0.9], b.quantiles[0.9])


def test_predict_origins_matches_predict(fitted):
    origins = HISTORY.index[[-400, -300, -31]]
    many = fitted.predict_origins(HISTORY, origins)
    assert len(many) == len(origins)
    for o, f in zip(origins, many):
        one = fitted.predict(HISTORY.loc[HISTORY.index < o])
        assert f.origin == o
        np.testing.assert_allclose(f.mean, one.mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(f.quantiles[0.1], one.quantiles[0.1], rtol=1e-5, atol=1e-6)


def test_near_tracks_level(fitted):
    """Sanity: the P50 a minute ahead is within a factor of 2 of the recent level."""
    f = fitted.predict(HISTORY)
    level = HISTORY["requests"].iloc[-30:].mean()
    assert 0.5 * level < f.quantiles[0.5][0] < 2 * level
