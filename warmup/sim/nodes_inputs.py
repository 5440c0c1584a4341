"""The test part of every deployment on a node pool, with its online forecasts (made before each
minute from data strictly before it, as ``backtest fleet`` makes them) and its core policy factory."""
from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd

from warmup.sim.backtest import FleetBacktestConfig, compute_forecasts, make_split
from warmup.sim.nodes_backtest import Inputs, NodeMember, common_window, core_policy

# the planner's levels (its quantile and the ones tuning tries: warmup.sim.nodes_tune) and the pool's
LEVELS = (0.1, 0.5, 0.7, 0.9, 0.95, 0.99)


def inputs_for(members: Sequence[NodeMember], test_start: pd.Timestamp, forecaster: str,
               test_end: Optional[pd.Timestamp] = None) -> Inputs:
    """Every member's part from ``test_start`` over the minutes all of them have (to ``test_end`` when
    given: the validation days before a test), forecasts included."""
    minutes, _ = common_window({m.name: m.log for m in members}, test_start)
    end = test_start + pd.Timedelta(minutes=minutes)
    end = end if test_end is None else min(end, test_end)
    arrivals, before, cores, times = {}, {}, {}, None
    for m in members:
        cfg = FleetBacktestConfig(capacity_rpm=m.capacity_rpm, cold_start_min=m.instance_lead_min,
                                  test_start=test_start, test_end=end, forecaster=forecaster,
                                  min_replicas=m.min_replicas, max_replicas=m.max_replicas, gpus_per_replica=m.gpus)
        split = make_split(m.log, test_start, end)
        bundle = compute_forecasts(m.log, cfg, LEVELS)
        times = [t.to_pydatetime() for t in split.times]
        arrivals[m.name], before[m.name] = split.arrivals, split.minute_before
        cores[m.name] = core_policy(cfg.core_config(), times, tuple(bundle.levels), bundle.paths, bundle.model)
    return Inputs(arrivals, before, times, cores)
