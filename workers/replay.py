"""``warmcast replay``: the workers' own tick driven minute by minute over a log, on the simulator's fleet.

Per replayed minute ``t`` (the clock injected, no Celery timing): the fleet simulator shows the
fleet at the start of the minute (:class:`workers.replay_fleet.ReplayFleet`); the minute before's
arrivals go into the load store as ingest records them; the forecast made at ``t`` (the
simulator's online forecast, from data strictly before ``t``) is stored as the forecast step
stores one; the signals step reads the fleet; the tick (``workers.steps.tick.step``) reads all
of it from Redis, decides once, journals, applies through the backend and audits.  The simulator's
physics then serve the minute.  Outputs are those of ``warmcast backtest fleet`` for its
predictive policy (``plan_predictive.csv``, ``decisions_predictive.csv``, ``report.json``).

Everything is written under a key prefix of its own (``<prefix>:replay:<id>``), deleted at the
end: a replay never touches the live deployment's state.  Each key expires a day after it is first
written (:mod:`workers.expiring`), so a replay killed before its end leaves nothing for good.
"""
from __future__ import annotations

import time
import uuid
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, ContextManager, Mapping, Optional, Sequence

import pandas as pd

from warmcast.config.settings import Settings
from warmup.core import CoreConfig
from warmup.sim.fleet import Observation
from warmup.sim.meter import Meter
from warmup.sim.switches import profile_targets
from warmup.sim.policies import fleet_capacity
from warmup.sim.warmups import WarmupCharges
from workers.context import Ctx
from workers.expiring import ExpiringRedis
from workers.coreconfig import live_core_config
from workers.options import WorkerOptions, replay_options
from workers.replay_fleet import ReplayFleet
from workers.steps import signals, tick


# A replay runs about 40 replayed minutes a second here (a week in under 5 minutes, a year in about
# 4 hours); a key written once at the start is read to the end, so its expiry must outlast the run.
REPLAY_TTL_S = 86400


class ReplayCtx(Ctx):
    """A worker context whose fleet is the replay's backend, under its own key prefix."""

    def __init__(self, settings: Settings, fleet: ReplayFleet, client: Any, live: CoreConfig) -> None:
        prefix = f"{settings.key_prefix}:replay:{uuid.uuid4().hex[:12]}"
        # every key expires from its first write: a replay killed before drop() leaves none for good
        super().__init__(settings.model_copy(update={"key_prefix": prefix}),
                         replay_options(), ExpiringRedis(client, prefix, REPLAY_TTL_S))
        self.fleet, self.live = fleet, live

    def core_config(self, dep: Any) -> CoreConfig:
        """The live loop's configuration (read from the live namespace when the replay began: stored
        policy-config and calibrations), so the replay decides with what the live loop would."""
        return self.live

    def sim(self, name: str) -> Any:
        return self.fleet

    def drop(self) -> int:
        """Delete every key the replay wrote."""
        keys = list(self.r.scan_iter(f"{self.prefix}:*", count=1000))
        return self.r.delete(*keys) if keys else 0


class ReplayPolicy:
    """The fleet simulator's policy interface, answered by the workers' tick through Redis."""

    name = "predictive"

    def __init__(self, ctx: ReplayCtx, dep: str, times: list[datetime], levels: tuple[float, ...],
                 paths: dict[float, Any], model: str, cfg: Any) -> None:
        self.ctx, self.dep, self.times, self.cfg = ctx, dep, times, cfg
        self.levels, self.paths, self.model = tuple(sorted(levels)), paths, model
        self.decisions: list[dict] = []
        self.events: list[tuple[int, str, str]] = []
        self.warmups = self.switches = self.rollbacks = 0
        self.journal: dict[str, Any] = {}
        self.charges = WarmupCharges()

    # ------------------------------------------------------------ what the simulator calls
    def observe_pools(self, t: int, pools: Mapping[str, Any]) -> None:
        """Each pool as minute ``t`` starts: the replayed fleet follows its instances by id."""
        self.ctx.fleet.track(pools, t)

    def decide(self, obs: Observation) -> int:
        self._tick(obs, None)
        return self.ctx.fleet.current()

    def asleep_target(self) -> int:
        return self.ctx.fleet.asleep_target

    def warmup_load(self, t: int, booting: Sequence[int] = ()) -> float:
        """Requests the tick's warmups take in minute ``t``, by the simulator's rule (``warmup.sim.warmups``)."""
        return self.charges.take(t, booting)

    def capacity_now(self) -> float:
        from workers import policy

        return fleet_capacity(self.cfg, policy.load(self.ctx.state, self.dep)[0])

    def switch_state(self) -> Any:
        """The switch machine as the tick left it (the simulator routes the minute's traffic by it)."""
        from workers import policy

        return policy.load(self.ctx.state, self.dep)[0].switch

    def decide_profiles(self, obs: Observation, pools: dict) -> tuple[dict[str, int], int, bool]:
        j = self._tick(obs, pools)
        fleet = self.ctx.fleet
        replicas = tuple(fleet.replicas.items()) if fleet.replicas else ()
        active = self.active
        desired = int(j["decision"]["desired"])   # the planner's own count, as the simulator counts it
        return profile_targets(replicas, desired, active, pools, j["phase"] in ("prewarm", "canary", "move",
                                                                                  "settle", "rollback"))

    @property
    def active(self) -> str:
        from workers import policy

        ps, _ = policy.load(self.ctx.state, self.dep)
        return ps.switch.active_profile or self.cfg.switch.default_profile

    def capacity_of(self, profile: str) -> float:
        return self.cfg.switch.capacity_of(profile, self.cfg.scaling.capacity_rpm)

    def observe_minute(self, trace: Any) -> None:
        """The minute just served (``warmup.sim.meter.MinuteTrace``): with ``--scrape-rounds`` the
        fleet's instances show it to the scrapes of the next tick."""
        self.ctx.fleet.meter_minute(trace, self.times[trace.t].timestamp())

    # ------------------------------------------------------------ one minute
    def _tick(self, obs: Observation, pools: Optional[dict]) -> dict[str, Any]:
        now = self.times[obs.t]
        self.ctx.fleet.observe(obs, now, pools, self.active if pools is not None else None)
        self._record_load(now, obs.last_minute_rpm)
        self._store_forecast(obs.t)
        self._run(now, obs.t)
        self.journal = j = self.ctx.state.get("plan-journal", self.dep)
        self._log(obs.t, j)
        return j

    def _run(self, now: datetime, t: int) -> None:
        """The signals step and the tick, in this process (the shadow replay can send the tick to a
        Celery worker instead: workers/shadow_replay.py)."""
        signals.step(self.ctx, self.dep)
        tick.step(self.ctx, self.dep, tick=now.strftime("%Y-%m-%dT%H:%M:%S"), run_id=f"replay-{t}", now=now)

    def _record_load(self, now: datetime, rpm: float) -> None:
        """The minute before ``now`` into the load store, as ingest records arrivals."""
        if rpm != rpm:  # NaN: nothing recorded for that minute
            return
        t = pd.Timestamp(now).tz_convert(None) - pd.Timedelta(minutes=1)
        self.ctx.store.upsert_frame(self.dep, pd.DataFrame({"requests": [float(rpm)]}, index=pd.DatetimeIndex(
            [t], name="time")), now_ns=pd.Timestamp(now).value)

    def _store_forecast(self, t: int) -> None:
        """Row ``t`` of the online forecasts as the forecast step stores a forecast."""
        rows = {q: self.paths[q] for q in self.levels} if self.paths else {}
        if not rows or t >= len(next(iter(rows.values()))):
            self.ctx.r.delete(self.ctx.state.key("forecast", self.dep))
            return
        origin = pd.Timestamp(self.times[t]).tz_convert(None)
        self.ctx.state.put("forecast", self.dep, {
            "origin": origin.strftime("%Y-%m-%d %H:%M:%S"), "model": self.model, "step_min": 1,
            "quantiles": {repr(float(q)): [float(x) for x in rows[q][t]] for q in self.levels}})

    def _log(self, t: int, j: dict[str, Any]) -> None:
        """The run's counts and decision log, in the simulator's own terms."""
        d, w, s = j["decision"], j["warmup"], j["switch"]
        if w["action"] == "start":
            self.warmups += 1
            self.events.append((t, "warmup", w["reason"]["text"]))
            self.charges.start(t, w["requests_per_instance"], self.ctx.fleet.positional(w["instances"]),
                               w["duration_s"])
        if s["action"] == "move_all":
            self.switches += 1
            self.events.append((t, "switch", s["reason"]["text"]))
        elif s["action"] == "rollback":
            self.rollbacks += 1
            self.events.append((t, "rollback", s["reason"]["text"]))
        lead = j["inputs"].get("lead") or {}
        load = {"load": j["inputs"]["observed_rpm"], "load_source": j["inputs"]["load_source"],
                "lead_min": lead.get("cold_start_min"), "lead_source": lead.get("source")}
        self.decisions.append({"t": t, **load, "current": d["current"], "desired": d["desired"], "ready": d["ready"],
                               "reactive": d["reactive_replicas"], "forecast": d["forecast_replicas"],
                               "reason": d["reason"]["code"], "text": d["reason"]["text"], "buffer": d["buffer"],
                               "asleep": d["asleep"], "wake": len(d["wake"]), "warmup": w["action"],
                               "switch": s["action"], "phase": j["phase"], "applied": bool(j["apply"])})


def minute_times(split: Any) -> list[datetime]:
    """The replayed minutes as UTC datetimes (the tick's injected clock)."""
    return [t.to_pydatetime().replace(tzinfo=timezone.utc) for t in split.times]


def deployment_config(core: Any, dep: Any, ts: pd.Timestamp, te: Optional[pd.Timestamp], forecaster: str,
                      decisions: bool = True) -> Any:
    """The fleet backtest's configuration for ``dep`` planning with ``core`` (the live loop's, as
    ``warmcast backtest fleet --deployment FILE --name D --stored-calibrations --stored-policy
    --policies predictive`` builds it): bounds, cold start, quantile, profiles, schedule, asleep tier."""
    from warmup.sim import FleetBacktestConfig

    sc = core.scaling
    cfg = FleetBacktestConfig(capacity_rpm=sc.capacity_rpm, cold_start_min=dep.cold_start_min, test_start=ts,
                              test_end=te, policies=("predictive",), quantile=sc.quantile,
                              target_utilisation=sc.target_utilisation, forecaster=forecaster,
                              min_replicas=dep.min_replicas, max_replicas=dep.max_replicas,
                              gpus_per_replica=dep.gpus_per_replica, record_decisions=decisions, core=core,
                              slo=dep.slo, wait_threshold_s=dep.slo.late_wait_s)
    if dep.sleep is not None:
        cfg = replace(cfg, wake_s=dep.sleep.wake_s, sleep_cost_share=dep.sleep.cost_share)
    return cfg


def stored_latency(ctx: Ctx, dep: Any) -> dict[str, Any]:
    """The stored calibrations' latency curves, as ``backtest fleet --stored-calibrations`` reads them:
    the default profile's (SLO attainment, latency lateness) and every profile's (a switch's TTFT per
    profile and the breaker's P99s; none unless every profile has one)."""
    from warmup.calibration.store import CalibrationStore
    from warmup.sim.fleet_capacity import resolve

    stored = CalibrationStore(ctx.r, ctx.settings.key_prefix).current(dep.name)
    if not stored:
        return {}
    caps = resolve(dep, None, None, stored)
    return {"latency": caps.latency, "latency_by_profile": tuple(sorted(caps.curves.items()))}


Driver = Callable[[ReplayCtx, str, pd.DataFrame], ContextManager[Callable[..., ReplayPolicy]]]


def run_replay(settings: Settings, deployment: str, data: Any, ts: pd.Timestamp, te: Optional[pd.Timestamp],
               forecaster: str, client: Any = None, driver: Optional[Driver] = None,
               scrape_rounds: bool = False) -> Any:
    """Replay ``data`` through the workers' tick for ``deployment``; a FleetResult like the backtest's.
    ``driver``: where each minute's tick runs, given the replay's context, the deployment and the load
    before the replay (a context manager yielding the policy class; workers/replay_worker.py runs it in a
    Celery worker); None: here.  ``scrape_rounds``: the signals step counts the arrivals from the fleet's
    per-instance readings every 10 s, as live (``warmup.sim.meter``), and the tick reads that count."""
    from warmup.sim.backtest import (compute_forecasts, forecast_levels, make_split, oracle_row,
                                     predictive_policy, run_online_policy)

    probe = Ctx(settings, WorkerOptions(), client)
    dep = probe.dep(deployment)          # an unknown deployment is refused here, before anything is written
    live = live_core_config(probe.r, settings.key_prefix, dep)
    cfg = replace(deployment_config(live, dep, ts, te, forecaster), **stored_latency(probe, dep))
    split = make_split(data, cfg.test_start, cfg.test_end)   # a log ending before the test start: refused
    bundle = compute_forecasts(data, cfg, forecast_levels(cfg), progress=True)
    sim_policy, info = predictive_policy(split, cfg, bundle)
    ctx = ReplayCtx(settings, ReplayFleet(cfg.capacity_rpm, meter=Meter() if scrape_rounds else None), probe.r, live)
    try:
        t0 = time.perf_counter()
        history = data.frame()[data.frame().index < split.times[0]] if driver is not None else None
        with (driver(ctx, deployment, history) if driver is not None else nullcontext(ReplayPolicy)) as make:
            pol = make(ctx, deployment, minute_times(split), bundle.levels, bundle.paths, bundle.model,
                       sim_policy.cfg)
            run = run_online_policy(pol, sim_policy, split, cfg)
        run.seconds = time.perf_counter() - t0
    finally:
        ctx.drop()
    where = "this process" if driver is None else "a Celery worker process"
    run.params = {**info, "decided_by": f"the workers' tick in {where} (warmcast replay)"}
    return oracle_row(data, cfg, split, bundle, {"predictive": run})
