"""Hot and cold pools planned together under shared limits.

Pure pipeline per step, each stage returning what bound it:

1. ``hot_stage``: hot gets the instances its SLO needs (demand at its target
   utilisation), cut only by its own maximum, the hot share of the compute budget
   (hot:cold ratio r means hot takes at most r/(1+r) of it) and the memory budget.
2. ``cold_room``: what the shared budget leaves for cold once hot is served.
3. ``cold_stage``: cold is planned against its deadline: the least instances that keep
   every queued request (and the expected arrivals) on time, pulling work forward into
   the troughs when later steps have less room; never more than the room.

Because cold only takes room left after hot, cold never has capacity while hot is
short of what the limits allow it (property-tested in tests/warmup/test_pools_core.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from warmup.core.prescale import replicas_for

_EPS = 1e-9


@dataclass(frozen=True)
class PoolShape:
    capacity_rpm: float            # requests/min one instance serves at 100% utilisation
    utilisation: float = 1.0       # target: hot keeps headroom for its latency SLO; cold can run full
    gpu_request: float = 1.0       # GPUs (compute units) one instance requests
    memory_gb: float = 0.0         # GPU memory one instance holds
    max_instances: int | None = None
    min_instances: int = 0


@dataclass(frozen=True)
class SharedLimits:
    physical_gpus: int
    gpu_memory_gb: float           # per physical GPU
    memory_share: float = 0.8      # all instances together hold at most this share of GPU memory
    hot_cold_ratio: float = 3.0    # hot takes at most ratio/(1+ratio) of the compute budget

    @property
    def memory_budget_gb(self) -> float:
        return self.physical_gpus * self.gpu_memory_gb * self.memory_share

    @property
    def hot_compute_cap(self) -> float:
        return self.physical_gpus * self.hot_cold_ratio / (1.0 + self.hot_cold_ratio)


@dataclass(frozen=True)
class ColdWork:
    requests: float
    due_step: int                  # must be served by the end of this step (0 = the current step)


@dataclass(frozen=True)
class JointInput:
    hot_rpm: tuple[float, ...]     # expected hot demand per step, step 0 = now
    cold_queue: tuple[ColdWork, ...]   # cold requests waiting now
    cold_rpm: tuple[float, ...]    # expected cold arrivals per step
    deadline_steps: int            # a cold request arriving in step j is due by step j + deadline_steps
    step_min: float
    hot: PoolShape
    cold: PoolShape
    limits: SharedLimits


@dataclass(frozen=True)
class StepPlan:
    hot: int
    cold: int
    hot_wanted: int
    cold_wanted: int
    hot_bound: str                 # "slo" | "hot max_instances" | "hot:cold ratio" | "memory" | "no demand"
    cold_bound: str                # "deadline" | "no work" | "memory" | "compute" | "cold max_instances" | ...
    reason: str

    def usage(self, hot: PoolShape, cold: PoolShape) -> tuple[float, float]:
        """(GPUs, GB) the step uses."""
        return (self.hot * hot.gpu_request + self.cold * cold.gpu_request,
                self.hot * hot.memory_gb + self.cold * cold.memory_gb)


def _fit(n: float, per: float) -> int:
    return n if per <= 0 else int(math.floor(n / per + _EPS))


def hot_stage(rpm: float, hot: PoolShape, limits: SharedLimits) -> tuple[int, int, str]:
    """(instances, wanted, bound): the SLO's need, cut by the first limit in the way."""
    wanted = max(hot.min_instances, replicas_for(rpm, hot.capacity_rpm, hot.utilisation))
    caps = [("hot max_instances", hot.max_instances if hot.max_instances is not None else wanted),
            ("hot:cold ratio", _fit(limits.hot_compute_cap, hot.gpu_request)),
            ("memory", _fit(limits.memory_budget_gb, hot.memory_gb))]
    n, bound = wanted, ("slo" if wanted else "no demand")
    for name, cap in caps:
        if cap < n:
            n, bound = cap, name
    return n, wanted, bound


def cold_room(hot_n: int, hot: PoolShape, cold: PoolShape, limits: SharedLimits) -> tuple[int, str]:
    """(most cold instances, the limit that sets it) once ``hot_n`` hot instances are placed."""
    free_gpus = limits.physical_gpus - hot_n * hot.gpu_request
    free_mem = limits.memory_budget_gb - hot_n * hot.memory_gb
    caps = [("compute", _fit(free_gpus, cold.gpu_request)), ("memory", _fit(free_mem, cold.memory_gb))]
    if cold.max_instances is not None:
        caps.append(("cold max_instances", cold.max_instances))
    name, cap = min(caps, key=lambda c: c[1])
    return max(cap, 0), name


def cold_stage(due: list[float], queued: float, room: list[int], per_instance: float,
               room_bound: str) -> tuple[int, int, str, str]:
    """(instances, wanted, bound, reason) for cold in step 0 of ``due``.

    ``due[k]``: requests (cumulative) that must be served by the end of step k; ``room[k]``:
    the most cold instances step k allows; ``per_instance``: requests one serves per step.
    Wanted is the larger of the least steady rate that meets every deadline and what must
    be done now because later steps have too little room (filling the trough), but never
    more than is queued."""
    if queued <= _EPS:
        return 0, 0, "no work", "cold: nothing queued"
    steady = max(d / (k + 1) for k, d in enumerate(due)) if due else 0.0
    later, forward = 0.0, 0.0
    for k, d in enumerate(due):
        later += room[k] * per_instance if k else 0.0
        forward = max(forward, d - later)
    need = min(max(steady, forward, 0.0), queued)
    wanted = max(1, math.ceil(need / per_instance - _EPS))
    n = min(wanted, room[0])
    if n < wanted:
        at_risk = forward > n * per_instance + _EPS
        return n, wanted, room_bound, (f"cold yields to hot: {room_bound} leaves room for {n} of {wanted}"
                                       + ("; a deadline is at risk" if at_risk else "; deadlines still reachable"))
    why = "pulled forward: later steps have less room" if forward > steady + _EPS else "least steady rate"
    return n, wanted, "deadline", f"cold: {why} that meets every deadline ({need:.1f} requests this step)"


def _due_curve(queue: list[ColdWork], expected: list[float], now: int, horizon: int, deadline: int) -> list[float]:
    """Cumulative requests due by the end of each step from ``now``, queued and expected."""
    due = [0.0] * horizon
    for w in queue:
        k = max(w.due_step - now, 0)
        if k < horizon:
            due[k] += w.requests
    for j, amount in enumerate(expected, start=1):
        k = j + deadline
        if k < horizon:
            due[k] += amount
    for k in range(1, horizon):
        due[k] += due[k - 1]
    return due


def _serve(queue: list[ColdWork], amount: float) -> list[ColdWork]:
    """Serve ``amount`` requests, earliest deadline first; return what is left."""
    left, out = amount, []
    for w in sorted(queue, key=lambda w: w.due_step):
        take = min(w.requests, left)
        left -= take
        if w.requests - take > _EPS:
            out.append(ColdWork(w.requests - take, w.due_step))
    return out


def plan_joint(inp: JointInput) -> list[StepPlan]:
    """Plan both pools for every step of ``inp.hot_rpm``; step 0 is the decision to act on now."""
    steps = len(inp.hot_rpm)
    hot = [hot_stage(r, inp.hot, inp.limits) for r in inp.hot_rpm]
    rooms = [cold_room(h[0], inp.hot, inp.cold, inp.limits) for h in hot]
    per = inp.cold.capacity_rpm * inp.cold.utilisation * inp.step_min
    horizon = max(steps, inp.deadline_steps + 1)
    queue = list(inp.cold_queue)
    plans = []
    for j in range(steps):
        arrivals = inp.cold_rpm[j] * inp.step_min if j < len(inp.cold_rpm) else 0.0
        if j and arrivals > _EPS:  # step 0's arrivals are in the queue already
            queue.append(ColdWork(arrivals, j + inp.deadline_steps))
        room = [rooms[min(j + k, steps - 1)][0] for k in range(horizon)]
        expected = [r * inp.step_min for r in inp.cold_rpm[j + 1:]]
        due = _due_curve(queue, expected, j, horizon, inp.deadline_steps)
        queued = sum(w.requests for w in queue)
        n, wanted, bound, why = cold_stage(due, queued, room, per, rooms[j][1])
        queue = _serve(queue, n * per)
        h_n, h_wanted, h_bound = hot[j]
        hot_why = f"hot: {h_n} of {h_wanted} wanted ({h_bound})"
        plans.append(StepPlan(h_n, n, h_wanted, wanted, h_bound, bound, f"{hot_why}; {why}"))
    return plans
