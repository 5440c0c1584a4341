"""Shadow mode replayed (issue 30): a simulated fleet scaled by the current autoscaler (the
simulator's HPA-like reactive policy) carries a log, while the workers' own tick runs beside it in
forecast-only mode on real Redis, minute by minute with the clock injected (as ``warmcast replay``
drives it, :mod:`workers.replay`), and writes its shadow records.

With a Celery app the tick runs where it runs live: the driver publishes the minute's fleet in
Redis (:func:`workers.replay_fleet.publish`) and sends ``warmcast.plan`` with the replayed minute as
its clock to a real worker process, whose backend reads that fleet (``WARMCAST_WORKERS_REPLAYED_FLEET``)
and which must run forecast-only (``WARMCAST_DRY_RUN=true``); the driver waits for each tick.

Unlike ``warmcast replay`` it works under the settings' own key prefix and keeps what it wrote: the
shadow records, the audit entries and the arrivals recorded in the load store are what ``warmcast
report shadow`` reads afterwards, exactly as it reads those of a live loop.
"""
from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from warmcast.config.settings import Settings
from warmup.core import CoreConfig
from warmup.sim.fleet import FleetRun, Observation
from warmup.sim.loop import run_online
from warmup.sim.autoscalers import ReactiveHPA
from workers.context import Ctx
from workers.options import WorkerOptions, replay_options
from workers.replay import ReplayPolicy, deployment_config, minute_times
from workers.replay_fleet import ReplayFleet
from workers.replay_worker import WorkerTicker


class ShadowCtx(Ctx):
    """A worker context in forecast-only mode whose fleet is the simulator's, under the settings' prefix."""

    def __init__(self, settings: Settings, fleet: ReplayFleet, client: Any, live: CoreConfig) -> None:
        super().__init__(settings.model_copy(update={"dry_run": True}),
                         replay_options(), client)
        self.fleet, self.live = fleet, live

    def core_config(self, dep: Any) -> CoreConfig:
        return self.live

    def sim(self, name: str) -> Any:
        return self.fleet


class ShadowPolicy:
    """The simulator's policy interface: the current autoscaler decides the fleet; each minute the
    workers' tick first reads that fleet and records its own decision (applying nothing)."""

    def __init__(self, ticker: ReplayPolicy, autoscaler: ReactiveHPA) -> None:
        self.ticker, self.autoscaler, self.name = ticker, autoscaler, autoscaler.name

    def observe_pools(self, t: int, pools: Any) -> None:
        self.ticker.observe_pools(t, pools)

    def decide(self, obs: Observation) -> int:
        self.ticker._tick(obs, None)
        return self.autoscaler.decide(obs)


def run_shadow(settings: Settings, deployment: str, data: Any, ts: pd.Timestamp, te: Optional[pd.Timestamp],
               forecaster: str, client: Any = None, utilisation: float = 0.8, celery: Any = None) -> FleetRun:
    """Replay ``data`` over [ts, te) on a fleet the reactive policy scales for ``utilisation`` of its
    capacity, with warmcast's tick shadowing it (in this process, or in ``celery``'s workers); the
    fleet's run (provisioned, ready, late per minute)."""
    from warmup.sim.backtest import _initial, compute_forecasts, forecast_levels, make_split, predictive_policy
    from workers.coreconfig import live_core_config

    probe = Ctx(settings, WorkerOptions(), client)
    dep = probe.dep(deployment)
    live = live_core_config(probe.r, settings.key_prefix, dep, dry_run=True)
    cfg = deployment_config(live, dep, ts, te, forecaster, decisions=False)
    split = make_split(data, cfg.test_start, cfg.test_end)
    bundle = compute_forecasts(data, cfg, forecast_levels(cfg))
    sim_policy, _ = predictive_policy(split, cfg, bundle)
    ctx = ShadowCtx(settings, ReplayFleet(cfg.capacity_rpm), probe.r, live)
    args = (ctx, deployment, minute_times(split), bundle.levels, bundle.paths, bundle.model, sim_policy.cfg)
    ticker = ReplayPolicy(*args) if celery is None else WorkerTicker(celery, *args, shadow=True)
    hpa = ReactiveHPA(cfg.capacity_rpm, utilisation, cfg.reactive_stabilisation_min,
                      cfg.min_replicas, cfg.max_replicas)
    return run_online(ShadowPolicy(ticker, hpa), split.arrivals, split.minute_before, cfg.fleet_params(),
                      _initial(hpa, split), split.observed)
