"""The fleet forecaster (issue 43): one LSTM across every deployment and client series
(:mod:`~forecaster.global_lstm.model`), its panel of series (:mod:`~forecaster.global_lstm.panel`),
the vectorised rows it reads (:mod:`~forecaster.global_lstm.rows`) and the reconciliation of
client forecasts with their deployment's total (:mod:`~forecaster.global_lstm.reconcile`)."""
from forecaster.global_lstm.model import GlobalLSTM, fleet_config, tiny_fleet_config
from forecaster.global_lstm.panel import Panel

__all__ = ["GlobalLSTM", "Panel", "fleet_config", "tiny_fleet_config"]
