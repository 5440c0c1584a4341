"""Load forecasting: an LSTM with calibrated quantiles, strong baselines, fallback,
rolling backtest and a versioned model registry.

* :mod:`forecaster.base` -- the one model protocol (``fit`` / ``predict``) and helpers; the
  :class:`Forecast` value lives in :mod:`warmcast.forecast`. :mod:`forecaster.catalogue` -- models by name.
* :mod:`forecaster.lstm` -- :class:`LSTMForecaster` (``predict``, ``predict_many``,
  ``predict_origins``): a package of config, features, network, training, artifact.
* :mod:`forecaster.baselines` -- persistence, seasonal naive (day/week),
  Holt-Winters, UnobservedComponents with daily Fourier terms; :mod:`forecaster.bands`
  their empirical error bands.
* :mod:`forecaster.fallback` -- :class:`FallbackForecaster`.
* :mod:`forecaster.backtest` -- rolling-origin backtest, metrics, plot.
* :mod:`forecaster.registry` -- versioned artifacts, champion/challenger.
* :mod:`forecaster.resolver` -- which model answers a deployment, and why (CLI, API, workers).
* :mod:`forecaster.live` -- train/forecast a stored deployment; :mod:`warmcast.cli.forecast`.

Heavy imports (torch, statsmodels) happen inside the modules that need them.
"""
