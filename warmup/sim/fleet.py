"""The fleet model: instances with a cold start, per-instance capacity and a FIFO queue.

Each minute:
1. instances whose cold start has finished become ready;
2. the policy sees what a controller would see at the start of the minute (the
   arrivals of the minutes before, the queue depth, the ready and booting
   instances) and names the number of instances it wants provisioned;
3. launches start booting (ready ``cold_start_min`` minutes later; they cost GPU
   time from launch), and scale-in removes booting instances first (newest first),
   then ready ones;
4. the minute's arrivals are served by the ready instances through one FIFO queue.

The queue is a fluid FIFO at the log's resolution: within a step arrivals come at a
constant rate, the ready instances serve ``ready * capacity_rpm / 60`` requests/s
(less what warmup requests take), and a request waits for the backlog ahead of it.
A request is *late* when that wait is over ``wait_threshold_s`` (5 s); lateness is
counted exactly for the linear backlog inside each step.  Below saturation, where a
calibration's latency curve is given, a request is also late when the curve's time to
first token at the minute's load per instance exceeds the wait (``summarise``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np

from warmup.sim.latency import LatencyCurve, estimate_ttft_p99_ms, late_below_saturation, slo_attainment


@dataclass(frozen=True)
class FleetParams:
    capacity_rpm: float
    cold_start_min: float = 15.0
    wait_threshold_s: float = 5.0
    gpus_per_replica: int = 1
    wake_s: Optional[float] = None      # the asleep tier's wake time (None: no asleep tier; warmup/sim/sleep.py)
    sleep_cost_share: float = 1.0       # an asleep instance's share of a GPU-hour

    @property
    def boot_minutes(self) -> int:
        return int(math.ceil(self.cold_start_min - 1e-9))


@dataclass
class Observation:
    """What a controller sees at the start of minute ``t`` (index into the test part)."""

    t: int
    last_minute_rpm: float   # arrivals in the previous minute (NaN if unknown)
    queue_depth: float       # requests waiting now
    ready: int
    booting: int             # instances launched but not ready yet
    max_wait_last_s: float   # longest wait of a request in the previous minute (fluid model)
    asleep: int = 0          # instances asleep (not provisioned; they wake in ``wake_s``)
    p99_s: Optional[float] = None                    # TTFT P99 of the previous minute (None: not read)
    p99_by_profile: tuple[tuple[str, float], ...] = ()   # each profile's own (warmup/sim/mixed_latency.py)

    @property
    def provisioned(self) -> int:
        return self.ready + self.booting


class Policy(Protocol):
    name: str

    def decide(self, obs: Observation) -> int: ...


def serve_step(q: float, a: float, mu: float, dt: float, w: float) -> tuple[float, float, float]:
    """(backlog after, late arrivals, longest wait) for one step of ``dt`` seconds.

    ``q`` backlog at the start, ``a`` arrivals spread evenly over the step, ``mu``
    service rate in requests/s, ``w`` the lateness threshold in seconds.
    """
    if mu <= 0.0:
        return q + a, a, (math.inf if a > 0 or q > 0 else 0.0)
    lam = a / dt
    thr = w * mu
    late = 0.0
    if lam >= mu:
        end = q + (lam - mu) * dt
        if q >= thr:
            late = a
        elif lam > mu and end > thr:
            late = lam * (dt - (thr - q) / (lam - mu))
        return end, late, end / mu
    # draining
    if q > thr:
        late = lam * min(dt, (q - thr) / (mu - lam))
    end = q - (mu - lam) * dt
    return (end if end > 0.0 else 0.0), late, q / mu


def serve_minute(q: float, steps: list, mu: float, dt: float, w: float,
                 trail: Optional[list] = None) -> tuple[float, float, float]:
    """Serve one minute of sub-minute arrival steps: (backlog after, late arrivals, longest wait);
    ``trail`` gets the backlog after each step (the replay's meter reads it: ``warmup.sim.meter``)."""
    late = longest = 0.0
    for a in steps:
        q, lt, m = serve_step(q, a, mu, dt, w)
        late += lt
        longest = max(longest, m)
        if trail is not None:
            trail.append(q)
    return q, late, longest


@dataclass
class FleetRun:
    """Per-minute record of one policy on the test part."""

    name: str
    provisioned: np.ndarray
    ready: np.ndarray
    late: np.ndarray          # late requests per minute
    queue: np.ndarray         # backlog at the end of each minute
    max_wait: np.ndarray      # longest wait per minute (s)
    launches: int = 0
    warmups: int = 0
    profile_switches: int = 0
    rollbacks: int = 0        # profile switches the P99 breaker rolled back
    events: list[tuple[int, str, str]] = field(default_factory=list)   # (minute, kind, text)
    decisions: list[dict] = field(default_factory=list)               # optional decision log
    params: dict = field(default_factory=dict)
    seconds: float = 0.0
    capacity: Optional[np.ndarray] = None   # per-instance capacity per minute when it changes (profiles)
    standby: Optional[np.ndarray] = None    # GPU-equivalents held asleep (or booting to sleep) per minute
    wakes: int = 0
    switching: Optional[np.ndarray] = None  # minutes a profile switch runs (warmup.sim.switches)
    switch_extra: Optional[np.ndarray] = None   # replicas above the planner's own count in those minutes
    switch_carried: Optional[np.ndarray] = None  # switch minutes still draining a backlog from before it
    latency_late: Optional[np.ndarray] = None    # late from TTFT per profile (mixed_latency), when the run counts it
    ttft_p99_ms: Optional[np.ndarray] = None     # the fleet's TTFT P99 per minute, when the run computes it
    canary_share: Optional[np.ndarray] = None    # the canary's share of requests in each canary minute (NaN else)
    warmup_requests: Optional[np.ndarray] = None  # warmup requests charged to serving capacity per minute


def serve_minutes(ready: np.ndarray, arrivals: np.ndarray, params: FleetParams,
                  q0: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Serve a fixed plan: (late per minute, backlog at minute end, max wait per minute).

    ``arrivals`` has shape (minutes, steps_per_minute).
    """
    T, k = arrivals.shape
    dt = 60.0 / k
    cap_s = params.capacity_rpm / 60.0
    w = params.wait_threshold_s
    late = np.zeros(T)
    queue = np.zeros(T)
    mw = np.zeros(T)
    q = q0
    rows = arrivals.tolist()
    rd = ready.tolist()
    for t in range(T):
        q, lt, mx = serve_minute(q, rows[t], rd[t] * cap_s, dt, w)
        late[t] = lt
        queue[t] = q
        mw[t] = mx
    return late, queue, mw


def boot_finished(booting: list[int], t: int) -> int:
    """Drop the instances whose ready-minute has come from ``booting`` (in launch order); how many."""
    n_done = 0
    for r in booting:
        if r > t:
            break
        n_done += 1
    del booting[:n_done]
    return n_done


def resize(want: int, ready: int, booting: list[int], t: int, boot_minutes: int) -> tuple[int, int]:
    """(ready, launched) after launching or removing instances to reach ``want``; removals cancel the
    newest booting instances first, then ready ones.  ``booting`` is changed in place."""
    have = ready + len(booting)
    if want > have:
        n = want - have
        if boot_minutes <= 0:
            return ready + n, n
        booting.extend([t + boot_minutes] * n)
        return ready, n
    if want < have:
        n = have - want
        cut = min(n, len(booting))
        if cut:
            del booting[len(booting) - cut:]
        ready -= n - cut
    return ready, 0


@dataclass
class Pool:
    """The instances of one profile (a policy without profiles has one pool): the ready ones, the
    ready-minute of each booting one, and the launches made."""

    ready: int = 0
    booting: list[int] = field(default_factory=list)
    launches: int = 0

    def advance(self, t: int) -> None:
        self.ready += boot_finished(self.booting, t)

    def resize(self, want: int, t: int, boot_minutes: int) -> int:
        """Launch or remove (booting newest first, then ready) to reach ``want``; launches made."""
        self.ready, launched = resize(want, self.ready, self.booting, t, boot_minutes)
        return launched

    @property
    def provisioned(self) -> int:
        return self.ready + len(self.booting)


def run_plan(name: str, provisioned: np.ndarray, ready: np.ndarray, arrivals: np.ndarray,
             params: FleetParams) -> FleetRun:
    """Serve a precomputed plan (the oracle's)."""
    late, queue, mw = serve_minutes(ready, arrivals, params)
    launches = int(np.clip(np.diff(ready, prepend=ready[0]), 0, None).sum())
    return FleetRun(name=name, provisioned=np.asarray(provisioned, dtype=np.int64),
                    ready=np.asarray(ready, dtype=np.int64), late=late, queue=queue, max_wait=mw,
                    launches=launches)


def _finite(x: float) -> Optional[float]:
    return round(x, 1) if math.isfinite(x) else None


def policy_label(name: str, row: dict) -> str:
    """A policy's name where it is shown (table, picture): a fleet sized on the test part says so."""
    return f"{name} (hindsight)" if row.get("hindsight") else name


def switch_columns(run: FleetRun, gpus_per_replica: int) -> dict:
    """GPU-hours the profile switches cost and requests late while one ran (zeros without switches)."""
    on = run.switching
    if on is None or run.switch_extra is None:
        return {"switch_minutes": 0, "switch_gpu_hours": 0.0, "late_during_switches": 0.0,
                "late_caused_by_switches": 0.0}
    own = on & ~run.switch_carried if run.switch_carried is not None else on
    late = run.late if run.latency_late is None else run.late + run.latency_late   # a slower target's too
    shares = run.canary_share[np.isfinite(run.canary_share)] if run.canary_share is not None else np.array([])
    return {"switch_minutes": int(on.sum()),
            "switch_gpu_hours": round(float(run.switch_extra.sum()) * gpus_per_replica / 60.0, 3),
            "late_during_switches": round(float(late[on].sum()), 1),
            "late_caused_by_switches": round(float(late[own].sum()), 1),
            # the share of requests the canary really had, as routed (issue 42: 50% at one replica of two)
            "canary_request_share": round(float(shares.mean()), 4) if len(shares) else None,
            "canary_request_share_max": round(float(shares.max()), 4) if len(shares) else None}


def latency_lateness(run: FleetRun, demand: np.ndarray, cap: np.ndarray, latency: Optional[LatencyCurve],
                     wait_s: float) -> np.ndarray:
    """Per minute, the requests late from their TTFT below saturation: the run's own count where the
    simulation kept one (profiles, each on its curve), else from ``latency`` (none without a curve)."""
    if run.latency_late is not None:
        return run.latency_late
    if latency is None:
        return np.zeros(len(demand))
    return late_below_saturation(latency, demand, cap, run.late, wait_s)


def summarise(run: FleetRun, demand: np.ndarray, params: FleetParams, oracle_gpu_hours: Optional[float] = None,
              capacity_per_minute: Optional[np.ndarray] = None, latency: Optional[LatencyCurve] = None) -> dict:
    """The report row of one policy. With a calibration's ``latency`` curve, a request is also late when
    the curve says its time to first token at the minute's load exceeds the wait (below saturation
    too), and the row gives the SLO attainment; without one, only the fleet's queue makes requests late."""
    total = float(demand.sum())
    held = float(run.provisioned.sum()) + (float(run.standby.sum()) if run.standby is not None else 0.0)
    gpu_hours = held * params.gpus_per_replica / 60.0
    if capacity_per_minute is None:
        per = run.capacity if run.capacity is not None else params.capacity_rpm
        capacity_per_minute = run.ready * per
    cap = capacity_per_minute
    slow = latency_lateness(run, demand, cap, latency, params.wait_threshold_s)
    p99 = run.ttft_p99_ms if run.ttft_p99_ms is not None else (
        None if latency is None else estimate_ttft_p99_ms(latency, demand, cap, run.max_wait))
    late = run.late + slow
    row = {
        "gpu_hours": round(gpu_hours, 3),
        "gpu_hours_vs_oracle": round(gpu_hours / oracle_gpu_hours, 4) if oracle_gpu_hours else None,
        "requests": int(round(total)),
        "late_requests": round(float(late.sum()), 1),
        "late_share": float(late.sum() / total) if total > 0 else 0.0,
        "late_pct": round(100.0 * float(late.sum() / total), 4) if total > 0 else 0.0,
        **({} if latency is None or p99 is None else {  # the TTFT each minute, and what it made late
            **slo_attainment(p99, demand, latency.bound_ms), "late_from_latency": round(float(slow.sum()), 1)}),
        "minutes_short": int(np.count_nonzero(demand > cap + 1e-9)),
        "minutes_with_late": int(np.count_nonzero(late > 0.5)),
        "max_wait_s": _finite(float(np.max(run.max_wait))) if len(run.max_wait) else 0.0,
        "scale_actions": int(np.count_nonzero(np.diff(run.provisioned))),
        "launches": int(run.launches),
        "wakes": int(run.wakes),
        "late_episodes": late_episodes(late),
        "warmups": int(run.warmups),
        "warmup_requests": round(float(run.warmup_requests.sum()), 1) if run.warmup_requests is not None else 0.0,
        "profile_switches": int(run.profile_switches),
        "switch_rollbacks": int(run.rollbacks),
        "mean_replicas": round(float(run.provisioned.mean()), 3),
        "max_replicas": int(run.provisioned.max()) if len(run.provisioned) else 0,
        "sim_seconds": round(run.seconds, 3),
        **switch_columns(run, params.gpus_per_replica),
        "params": run.params,
    }
    return row


def late_episodes(late: np.ndarray, gap_min: int = 10, min_late: float = 0.5) -> int:
    """Distinct late episodes: runs of minutes with late requests, split by ``gap_min`` minutes without."""
    idx = np.flatnonzero(np.asarray(late) > min_late)
    if len(idx) == 0:
        return 0
    return int(1 + np.count_nonzero(np.diff(idx) > gap_min))
