"""The policies the fleet simulator compares.

- ``static``: the peak of the test part, provisioned all the time (sized with hindsight).
- ``reactive`` and ``queue``: the Kubernetes HPA on the request rate and KEDA on the waiting
  queue, with their documented rules (``warmup/sim/autoscalers.py``).
- ``predictive``: this project's decision core (:func:`warmup.core.decide`) fed
  with online forecasts (each from data strictly before its minute).
- ``oracle``: perfect foresight, the physical limit: each minute exactly
  ceil(demand / capacity) ready replicas, every launch started one cold start
  ahead, and a replica kept through a gap shorter than the cold start (cheaper
  than relaunching it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional, Sequence

import numpy as np

from warmup.core import (
    CoreConfig,
    ForecastInput,
    Instance,
    InstanceState,
    PolicyState,
    ScalingConfig,
    SwitchPhase,
    TickInput,
    WarmupAction,
    decide,
    plan_replicas,
)
from warmup.sim.errors import ForecastErrors
from warmup.sim.fleet import Observation
from warmup.sim.warmups import WarmupCharges


@dataclass
class StaticPeak:
    replicas: int
    name: str = "static"

    def decide(self, obs: Observation) -> int:
        return self.replicas


def fleet_capacity(cfg: CoreConfig, state: PolicyState) -> float:
    """Per-instance capacity of a one-pool fleet in ``state``: the active profile's, mixed during a canary."""
    sw = cfg.switch
    base = cfg.scaling.capacity_rpm
    if not sw.enabled or not sw.profile_capacity:
        return base
    st = state.switch
    active = sw.capacity_of(st.active_profile or sw.default_profile, base)
    if st.phase is SwitchPhase.CANARY and st.target_profile:
        target = sw.capacity_of(st.target_profile, base)
        return (1.0 - sw.canary_share) * active + sw.canary_share * target
    return active


class CorePolicy:
    """The project's decision core driven minute by minute, with precomputed online forecasts.

    ``forecasts`` maps a quantile level to an array (test minutes, horizon); row t is
    the forecast made at the start of test minute t from data strictly before it.
    """

    def __init__(self, cfg: CoreConfig, times: list[datetime], levels: tuple[float, ...],
                 forecasts: Optional[dict[float, np.ndarray]], name: str = "predictive",
                 record: bool = False, model: str = "", origins: Optional[list[datetime]] = None) -> None:
        self.cfg = cfg
        self.origins = origins   # each row's origin where not its minute (a live forecast made a minute before)
        self.name = name
        self.times = times
        self.levels = tuple(sorted(levels)) if forecasts else ()
        self._fc = np.stack([forecasts[q] for q in self.levels], axis=1) if forecasts else None  # (T, L, H)
        self.state = PolicyState()
        self.record = record
        self.model = model
        self.decisions: list[dict] = []
        self.events: list[tuple[int, str, str]] = []
        self.warmups = 0
        self.switches = self.rollbacks = 0
        self.charges = WarmupCharges()
        self._inst_cache: dict[tuple[int, int, int], tuple[Instance, ...]] = {}
        self.errors = ForecastErrors(cfg.scaling, self.levels, self._fc, times, origins)
        self._asleep_target = 0
        self.last = None

    def capacity_now(self) -> float:
        """Per-instance capacity of the fleet now: the active profile's, mixed during a canary."""
        return fleet_capacity(self.cfg, self.state)

    def reset(self) -> None:
        self.state = PolicyState()
        self.decisions = []
        self.events = []
        self.warmups = 0
        self.switches = self.rollbacks = 0
        self.charges = WarmupCharges()
        self.errors.reset()
        self._asleep_target = 0
        self.last = None

    def warmup_load(self, t: int, booting: Sequence[int] = ()) -> float:
        """Requests warmups take from serving capacity in minute ``t`` (``warmup.sim.warmups``)."""
        return self.charges.take(t, booting)

    def asleep_target(self) -> int:
        """Instances the last decision keeps asleep (the fleet's asleep tier reads it)."""
        return self._asleep_target

    def _instances(self, ready: int, booting: int, asleep: int = 0) -> tuple[Instance, ...]:
        key = (ready, booting, asleep)
        inst = self._inst_cache.get(key)
        if inst is None:
            inst = tuple(Instance(f"r{i}", InstanceState.READY_BUSY) for i in range(ready)) + tuple(
                Instance(f"b{i}", InstanceState.BOOTING) for i in range(booting)) + tuple(
                Instance(f"s{i}", InstanceState.ASLEEP) for i in range(asleep))
            self._inst_cache[key] = inst
        return inst

    def forecast_at(self, t: int) -> Optional[ForecastInput]:
        if self._fc is None or t >= len(self._fc):
            return None
        row = self._fc[t]
        origin = self.times[t] if self.origins is None else self.origins[t]
        return ForecastInput(origin, self.levels, tuple(tuple(r) for r in row.tolist()), model=self.model)

    def decide(self, obs: Observation) -> int:
        t = obs.t
        minutes, errors = self.errors.observe(self.times[t], obs.last_minute_rpm)
        inp = TickInput(now=self.times[t], instances=self._instances(obs.ready, obs.booting, obs.asleep),
                        observed_rpm=obs.last_minute_rpm, queue_depth=obs.queue_depth,
                        p99_latency_s=obs.p99_s, forecast=self.forecast_at(t), active_profile="",
                        recent_errors=errors, error_minutes=minutes, p99_by_profile=obs.p99_by_profile)
        out = decide(self.cfg, inp, self.state)
        self.state = out.state
        self.last = out
        sc = out.scale
        self._asleep_target = sc.asleep_target
        if sc.wake:
            self.events.append((t, "wake", str(sc.reason)))
        if out.warmup.action is WarmupAction.START:
            self.warmups += 1
            self.events.append((t, "warmup", out.warmup.reason.text))
            w = out.warmup
            self.charges.start(t, w.requests_per_instance, w.instances, w.duration_s)
        if out.switch.action.value == "move_all":
            self.switches += 1
            self.events.append((t, "switch", out.switch.reason.text))
        elif out.switch.action.value == "rollback":
            self.rollbacks += 1
            self.events.append((t, "rollback", out.switch.reason.text))
        if sc.desired != sc.current:
            self.events.append((t, "scale", str(sc.reason)))
        if self.record:
            self.decisions.append({"t": t, "current": sc.current, "desired": sc.desired, "ready": sc.ready,
                                   "reactive": sc.reactive_replicas, "forecast": sc.forecast_replicas,
                                   "reason": sc.reason.code.value, "text": sc.reason.text,
                                   "buffer": sc.buffer, "asleep": sc.asleep, "wake": len(sc.wake),
                                   "warmup": out.warmup.action.value, "switch": out.switch.action.value,
                                   "phase": out.state.switch.phase.value, "applied": out.applied})
        return sc.desired


def oracle_plan(need: np.ndarray, cold_start_min: float) -> tuple[np.ndarray, np.ndarray]:
    """(provisioned, ready) per minute for perfect foresight of ``need`` ready replicas per minute.

    For each replica slot k, it is ready exactly when need >= k, launched one cold
    start before (booting minutes count as provisioned; a launch needed in the first
    ``cold_start`` minutes is taken to have started before the test), and kept through
    gaps no longer than the cold start, where keeping it costs no more than a relaunch.
    """
    need = np.asarray(need, dtype=np.int64)
    T = len(need)
    B = int(math.ceil(cold_start_min - 1e-9))
    prov = np.zeros(T, dtype=np.int64)
    ready = np.zeros(T, dtype=np.int64)
    top = int(need.max()) if T else 0
    for k in range(1, top + 1):
        idx = np.flatnonzero(need >= k)
        if len(idx) == 0:
            continue
        gaps = np.flatnonzero(np.diff(idx) - 1 > B)
        starts = np.concatenate([[idx[0]], idx[gaps + 1]])
        ends = np.concatenate([idx[gaps], [idx[-1]]])
        for st, en in zip(starts.tolist(), ends.tolist()):
            ready[st:en + 1] += 1
            prov[max(0, st - B) if st > 0 else 0:en + 1] += 1
    return prov, ready


def oracle_need(demand: np.ndarray, capacity_rpm: float, min_replicas: int = 1,
                max_replicas: Optional[int] = None) -> np.ndarray:
    """Ready replicas per minute with perfect foresight: the core's plan (:func:`plan_replicas`)
    with the true demand as its forecast, no lead (``oracle_plan`` launches ahead itself) and
    100% utilisation, i.e. ceil(demand / capacity), within [``min_replicas``, ``max_replicas``]: the
    fleet's bounds bind the physical limit as they bind every policy compared with it (issue 46: an
    oracle above ``max_replicas`` made a capped policy read cheaper than perfect foresight)."""
    d = np.maximum(np.nan_to_num(np.asarray(demand, dtype=float), nan=0.0), 0.0)
    if len(d) == 0:
        return np.zeros(0, dtype=np.int64)
    top = max(min_replicas, int(math.ceil(float(d.max()) / capacity_rpm)) + 1)
    if max_replicas is not None:
        top = max(min_replicas, min(top, max_replicas))
    cfg = CoreConfig(scaling=ScalingConfig(capacity_rpm=capacity_rpm, min_replicas=min_replicas, max_replicas=top,
                                           cold_start_min=0.0, quantile=0.5, target_utilisation=1.0))
    origin = datetime(2000, 1, 1, tzinfo=timezone.utc)  # the plan depends on the path, not on the date
    plan = plan_replicas(cfg, ForecastInput(origin, (0.5,), (tuple(d.tolist()),)), origin)
    return np.fromiter((s.desired for s in plan), dtype=np.int64, count=len(plan))
