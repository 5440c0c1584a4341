"""The models ``warmcast backtest forecast`` and the accuracy benchmark compare, by name (imported by
the CLI at start: the models themselves are imported only when made)."""
from __future__ import annotations

from warmcast.errors import InputError

ALL_MODELS = ("lstm", "persistence", "seasonal_naive_day", "seasonal_naive_week", "holt_winters", "uc_fourier")


def make_models(names: list[str], quick: bool = False, progress: bool = True) -> list:
    """Fresh models by name (``quick``: a tiny LSTM for smoke runs); an unknown name is refused."""
    from forecaster.base import DAY, WEEK
    from forecaster.baselines import HoltWinters, Persistence, SeasonalNaive, UCFourier
    from forecaster.lstm import LSTMConfig, LSTMForecaster

    factories = {
        "lstm": lambda: LSTMForecaster(LSTMConfig.tiny(epochs=4) if quick else LSTMConfig(), progress=progress),
        # the ablation (bench/forecast_accuracy.py): the same model with its recurrent state zeroed
        "lstm_no_recurrent": lambda: LSTMForecaster((LSTMConfig.tiny(epochs=4, recurrent=False) if quick
                                                     else LSTMConfig(recurrent=False)), progress=progress),
        "persistence": Persistence,
        "seasonal_naive_day": lambda: SeasonalNaive(DAY),
        "seasonal_naive_week": lambda: SeasonalNaive(WEEK),
        "holt_winters": HoltWinters,
        "uc_fourier": UCFourier,
    }
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise InputError(f"unknown model(s) {unknown}; choose from {list(factories)}")
    return [factories[n]() for n in names]
