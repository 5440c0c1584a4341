"""Replay a log with a pool label through hot and cold pools under three policies.

Per second, on the fleet model's own pools and queue (``warmup.sim.fleet``): hot is its fluid FIFO
(a request is late when it waits more than ``late_wait_s``); cold is a FIFO of requests by arrival second
(a request misses when it is served more than ``deadline_min`` after it arrived, or not
at all). Instances take ``cold_start_s`` from launch to ready and are paid from launch.
Decisions are made every minute from what has been observed so far:

- ``always-on``: separate static pools sized in hindsight for each pool's busiest minute;
- ``reactive``: separate pools; hot follows the last minute's load at its target
  utilisation, cold the last minute's arrivals at a utilisation plus its queue drained
  over half the deadline; both keep the highest need of the last ``scale_in_min`` minutes
  before scaling in (HPA-like stabilisation);
- ``joint``: warmcast's plan (:func:`warmup.planning.pools.plan_joint`): hot from the same
  load estimate as reactive, cold against its deadline within the shared limits.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from warmup.core.prescale import replicas_for
from warmup.planning.pools import ColdWork, JointInput, PoolShape, SharedLimits, plan_joint
from warmup.sim.fleet import Pool, serve_step


@dataclass(frozen=True)
class PoolSimConfig:
    hot: PoolShape
    cold: PoolShape
    limits: SharedLimits
    cold_start_s: int = 120
    late_wait_s: float = 5.0
    late_share: float = 0.0005      # hot SLO: at most this share waits longer than late_wait_s
    deadline_min: int = 30
    drain_min: int = 35             # minutes replayed after the log ends so cold work can finish
    scale_in_min: int = 5
    reactive_cold_utilisation: float = 0.8


@dataclass
class PoolRun:
    policy: str
    hot_requests: float
    hot_late: float
    cold_requests: float
    cold_missed: float
    hot_gpu_hours: float
    cold_gpu_hours: float
    peak_gpus: float
    over_limit_s: int               # seconds where the pools held more GPUs than the limits allow
    minutes: dict[str, list[float]] = field(default_factory=dict)

    @property
    def hot_late_share(self) -> float:
        return self.hot_late / max(self.hot_requests, 1.0)

    @property
    def gpu_hours(self) -> float:
        return self.hot_gpu_hours + self.cold_gpu_hours


@dataclass
class Observed:
    """What a policy may look at when it decides at the start of minute ``minute``."""

    minute: int
    hot_rpm: list[float]            # per finished minute
    cold_rpm: list[float]
    cold_queue: deque               # [arrival second, requests left], oldest first
    cold_backlog: float


Policy = Callable[[Observed], tuple[int, int]]


def _serve_cold(queue: deque, capacity: float, t: int, deadline_s: int) -> tuple[float, float]:
    """Serve up to ``capacity`` requests oldest first; returns (served, served after their deadline)."""
    served = late = 0.0
    while queue and capacity > 1e-12:
        item = queue[0]
        take = min(item[1], capacity)
        item[1] -= take
        capacity -= take
        served += take
        if t > item[0] + deadline_s:
            late += take
        if item[1] <= 1e-12:
            queue.popleft()
    return served, late


def replay(hot_per_s: np.ndarray, cold_per_s: np.ndarray, cfg: PoolSimConfig, policy: Policy, name: str) -> PoolRun:
    """Run one policy over the arrivals per second (hot and cold aligned, same length)."""
    total_s = len(hot_per_s) + cfg.drain_min * 60
    hot_a = np.r_[hot_per_s, np.zeros(cfg.drain_min * 60)]
    cold_a = np.r_[cold_per_s, np.zeros(cfg.drain_min * 60)]
    obs = Observed(0, [], [], deque(), 0.0)
    first = policy(obs)
    # the fleet model's pools, on a clock of seconds: a launch is ready ``cold_start_s`` after it
    hot, cold = Pool(ready=first[0]), Pool(ready=first[1])
    backlog = late = missed = hot_gs = cold_gs = peak = 0.0
    over = 0
    minutes: dict[str, list[float]] = {"hot": [], "cold": [], "cold_backlog": []}
    for t in range(total_s):
        if t and t % 60 == 0:
            m = t // 60
            obs.minute = m
            obs.hot_rpm.append(float(hot_a[t - 60:t].sum()))
            obs.cold_rpm.append(float(cold_a[t - 60:t].sum()))
            obs.cold_backlog = float(sum(i[1] for i in obs.cold_queue))
            h, c = policy(obs)
            hot.resize(h, t, cfg.cold_start_s)
            cold.resize(c, t, cfg.cold_start_s)
        hot.advance(t)
        cold.advance(t)
        # hot: the fleet model's fluid FIFO, one second a step
        backlog, late_s, _ = serve_step(backlog, float(hot_a[t]), hot.ready * cfg.hot.capacity_rpm / 60.0, 1.0,
                                        cfg.late_wait_s)
        late += late_s
        if cold_a[t] > 0:
            obs.cold_queue.append([t, float(cold_a[t])])
        missed += _serve_cold(obs.cold_queue, cold.ready * cfg.cold.capacity_rpm / 60.0, t, cfg.deadline_min * 60)[1]
        gh, gc = hot.provisioned * cfg.hot.gpu_request, cold.provisioned * cfg.cold.gpu_request
        hot_gs += gh
        cold_gs += gc
        peak = max(peak, gh + gc)
        mem = hot.provisioned * cfg.hot.memory_gb + cold.provisioned * cfg.cold.memory_gb
        over += int(gh + gc > cfg.limits.physical_gpus + 1e-9 or mem > cfg.limits.memory_budget_gb + 1e-9)
        if t % 60 == 59:
            minutes["hot"].append(hot.provisioned)
            minutes["cold"].append(cold.provisioned)
            minutes["cold_backlog"].append(float(sum(i[1] for i in obs.cold_queue)))
    missed += sum(i[1] for i in obs.cold_queue)  # never served
    return PoolRun(name, float(hot_per_s.sum()), float(late), float(cold_per_s.sum()), float(missed),
                   hot_gs / 3600, cold_gs / 3600, peak, over, minutes)


def always_on(hot_per_s: np.ndarray, cold_per_s: np.ndarray, cfg: PoolSimConfig) -> Policy:
    """Separate static pools for each pool's busiest minute (known in hindsight)."""
    peak_h = _per_minute(hot_per_s).max()
    peak_c = _per_minute(cold_per_s).max()
    hot_n = max(1, replicas_for(peak_h, cfg.hot.capacity_rpm, cfg.hot.utilisation))
    cold_n = max(1, replicas_for(peak_c, cfg.cold.capacity_rpm, cfg.reactive_cold_utilisation))
    return lambda obs: (hot_n, cold_n)


def _per_minute(per_s: np.ndarray) -> np.ndarray:
    n = len(per_s) // 60 * 60
    return per_s[:n].reshape(-1, 60).sum(axis=1)


def _hot_estimate(obs: Observed, cfg: PoolSimConfig, first_rpm: float) -> float:
    """The hot load both reactive and joint plan for: the busiest of the last scale_in_min minutes."""
    recent = obs.hot_rpm[-cfg.scale_in_min:]
    return max(recent) if recent else first_rpm


def reactive(hot_per_s: np.ndarray, cold_per_s: np.ndarray, cfg: PoolSimConfig) -> Policy:
    """Separate HPA/KEDA-like pools (see the module doc)."""
    first_h, first_c = float(hot_per_s[:60].sum()), float(cold_per_s[:60].sum())
    cold_raw: list[int] = []

    def decide(obs: Observed) -> tuple[int, int]:
        hot_n = max(1, replicas_for(_hot_estimate(obs, cfg, first_h), cfg.hot.capacity_rpm, cfg.hot.utilisation))
        rate = obs.cold_rpm[-1] if obs.cold_rpm else first_c
        need = rate / (cfg.cold.capacity_rpm * cfg.reactive_cold_utilisation) + \
            obs.cold_backlog / (cfg.cold.capacity_rpm * cfg.deadline_min / 2)
        cold_raw.append(math.ceil(need - 1e-9))
        return hot_n, max(cold_raw[-cfg.scale_in_min:])

    return decide


def _queue_by_minute(queue: deque, now_min: int, deadline_steps: int) -> tuple[ColdWork, ...]:
    """The cold queue as work due per minute of arrival (steps relative to now)."""
    due: dict[int, float] = {}
    for arrival_s, left in queue:
        step = arrival_s // 60 + deadline_steps - now_min
        due[step] = due.get(step, 0.0) + left
    return tuple(ColdWork(v, k) for k, v in sorted(due.items()))


def joint(hot_per_s: np.ndarray, cold_per_s: np.ndarray, cfg: PoolSimConfig, trend_min: int = 10) -> Policy:
    """warmcast's joint plan, re-planned every minute (receding horizon).

    The deadline is shortened by the cold start and one decision step, so work planned
    on instances that are still starting is not late; expected cold arrivals are the
    mean of the last ``trend_min`` minutes."""
    first_h, first_c = float(hot_per_s[:60].sum()), float(cold_per_s[:60].sum())
    deadline_steps = max(cfg.deadline_min - math.ceil(cfg.cold_start_s / 60) - 1, 0)
    horizon = deadline_steps + 1

    def decide(obs: Observed) -> tuple[int, int]:
        hot_rpm = _hot_estimate(obs, cfg, first_h)
        recent = obs.cold_rpm[-trend_min:]
        rate = float(np.mean(recent)) if recent else first_c
        queue = _queue_by_minute(obs.cold_queue, obs.minute, deadline_steps)
        if not obs.cold_rpm:  # the first decision: a minute of work is about to arrive
            queue = (ColdWork(first_c, deadline_steps),)
        plan = plan_joint(JointInput((hot_rpm,) * horizon, queue, (rate,) * horizon, deadline_steps, 1.0,
                                     cfg.hot, cfg.cold, cfg.limits))[0]
        return max(plan.hot, 1), plan.cold

    return decide


POLICIES: dict[str, Callable[[np.ndarray, np.ndarray, PoolSimConfig], Policy]] = {
    "always-on": always_on, "reactive": reactive, "joint": joint}


def run_all(hot_per_s: np.ndarray, cold_per_s: np.ndarray, cfg: PoolSimConfig) -> list[PoolRun]:
    return [replay(hot_per_s, cold_per_s, cfg, make(hot_per_s, cold_per_s, cfg), name)
            for name, make in POLICIES.items()]
