"""The LSTM forecaster, one module per concern: :mod:`~forecaster.lstm.config`,
:mod:`~forecaster.lstm.features`, :mod:`~forecaster.lstm.network`,
:mod:`~forecaster.lstm.training` (with calibration), :mod:`~forecaster.lstm.artifact`
and :mod:`~forecaster.lstm.model` (fit/predict)."""
from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.model import LSTMForecaster

__all__ = ["LSTMConfig", "LSTMForecaster"]
