"""Acting on the forecast: the pure decision core (:mod:`warmup.core`), the fleet
simulator (:mod:`warmup.sim`, ``warmcast backtest fleet``) and the actuators."""
