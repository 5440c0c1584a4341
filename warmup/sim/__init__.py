"""The fleet simulator: replay a load log through a fleet model under several policies.

See :mod:`warmup.sim.backtest` (``warmcast backtest fleet``), :mod:`warmup.sim.fleet`
(the fleet and queue model) and :mod:`warmup.sim.policies`.
"""
from warmup.sim.backtest import (
    POLICIES,
    FleetBacktestConfig,
    FleetResult,
    compute_forecasts,
    make_split,
    run_backtest,
    run_policy,
)
from warmup.sim.report import format_table, write_outputs
from warmup.sim.data import LoadLog, from_series, load_log

__all__ = ["POLICIES", "FleetBacktestConfig", "FleetResult", "LoadLog", "compute_forecasts", "format_table",
           "from_series", "load_log", "make_split", "run_backtest", "run_policy", "write_outputs"]
