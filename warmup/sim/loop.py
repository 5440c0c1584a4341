"""The one simulation loop (issue 42): every online policy, with or without profiles, runs here.

Each minute:
1. booting instances whose cold start has finished become ready, launches for the asleep tier go
   to sleep;
2. the policy sees what a controller would see at the start of the minute (``Observation``: the
   load of the minute before or the last ended bin, the queue, ready and booting instances, the
   TTFT P99 the previous minute had) and names what it wants: a count, or with profiles
   (``ProfilePolicy``) replicas per profile;
3. each profile's pool launches or removes instances (booting newest first, then ready); on the
   active profile the asleep tier is woken before anything launches and takes what a scale-in
   drops (``warmup.sim.sleep``);
4. the ready instances serve the minute's arrivals through one FIFO queue, each at its profile's
   capacity, less the requests warmups take (``warmup.sim.warmups``), the woken ones from their
   wake on;
5. with latency curves (a calibration's, else the documented default), each profile's TTFT at its
   share of the traffic is what the next minute's policy reads as P99, and the requests it makes
   late are counted (``warmup.sim.mixed_latency``).

Before, ``run_online`` (warmup charges and the asleep tier) and ``run_profiles`` (profiles and
latency feedback) were two loops and each missed what the other had.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np

from warmup.core.switch_capacity import request_shares
from warmup.sim.fleet import FleetParams, FleetRun, Observation, Policy, Pool, resize, serve_minute
from warmup.sim.latency import LatencyCurve
from warmup.sim.meter import MinuteTrace
from warmup.sim.mixed_latency import NONE, MinuteLatency, minute_latency
from warmup.sim.sleep import SleepPool
from warmup.sim.switches import canary_share, switch_state, uses_profiles

SINGLE = ""   # the one pool of a policy without profiles (its instances are r<i>, b<i>)


def run_online(policy: Policy, arrivals: np.ndarray, minute_before: float, params: FleetParams,
               initial_ready: int, observed: Optional[np.ndarray] = None,
               curves: Optional[Mapping[str, LatencyCurve]] = None) -> FleetRun:
    """Run an online policy over the test part; ``arrivals`` shape (minutes, steps_per_minute);
    ``observed``: the load seen at each minute's start where not the minute before's
    (``Split.observed``); ``curves``: each profile's latency curve, for the P99 feedback."""
    T, k = arrivals.shape
    rec = _Record(T, params.capacity_rpm, profiled(policy))
    pools = _pools(policy, initial_ready)
    sleep = make_pool(policy, params)
    q, last, last_wait, lat = 0.0, minute_before, 0.0, NONE
    metered = hasattr(policy, "observe_minute")   # a policy that reads the instances' meters (the replay)
    follows = hasattr(policy, "observe_pools")     # one that names each instance (the replay's ledger)
    rows, sums = arrivals.tolist(), arrivals.sum(axis=1).tolist()
    for t in range(T):
        for pool in pools.values():
            pool.advance(t)
        if sleep is not None:
            sleep.settle(t)
        seen = last if observed is None else float(observed[t])   # a coarse series: its last ended bin
        obs = Observation(t, seen, q, sum(p.ready for p in pools.values()),
                          sum(len(p.booting) for p in pools.values()), last_wait,
                          sleep.asleep if sleep is not None else 0, lat.fleet_p99_s, lat.p99_by_profile)
        if follows:
            policy.observe_pools(t, pools)
        planner, switching, woke, k_wake = _apply(policy, obs, pools, sleep, t, params.boot_minutes, k)
        caps = {n: _capacity(policy, n, params) for n in pools}
        ready = sum(p.ready for p in pools.values())
        rpm = sum(p.ready * caps[n] for n, p in pools.items())
        warm = _warmup_load(policy, t, pools)
        woke_rpm = woke * caps[_active(policy)]
        q0, trail = q, ([] if metered else None)
        served = _serve(q, rows[t], rpm, woke_rpm, k_wake, warm, 60.0 / k, params.wait_threshold_s, trail)
        q, late, wait = served
        if metered:
            policy.observe_minute(MinuteTrace(t, q0, tuple(rows[t]), tuple(trail),
                                              tuple((n, p.ready) for n, p in pools.items())))
        lat = _latency(policy, curves, pools, sums[t], late, wait, params.wait_threshold_s)
        rec.minute(t, pools, rpm / ready if ready else caps[_active(policy)], q0, served, warm, planner, switching,
                   lat, policy)
        if sleep is not None:
            rec.standby[t] = sleep.held(params.sleep_cost_share)
        last, last_wait = sums[t], wait
    return rec.run(policy, pools, sleep, curves)


class _Record:
    """The run's per-minute record; the switch columns only for a policy with profiles."""

    def __init__(self, T: int, capacity_rpm: float, profiles: bool) -> None:
        self.capacity_rpm, self.profiles = capacity_rpm, profiles
        self.prov, self.ready = np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
        self.late, self.queue, self.wait, self.warmed = np.zeros(T), np.zeros(T), np.zeros(T), np.zeros(T)
        self.caps, self.standby = np.full(T, capacity_rpm), np.zeros(T)
        self.in_switch, self.carried = np.zeros(T, dtype=bool), np.zeros(T, dtype=bool)
        self.extra, self.slow, self.p99 = np.zeros(T), np.zeros(T), np.full(T, np.inf)
        self.canary = np.full(T, np.nan)

    def minute(self, t: int, pools: dict[str, Pool], per_instance: float, q0: float, served: tuple,
               warm: float, planner: int, switching: bool, lat: MinuteLatency, policy: Any) -> None:
        q, late, wait = served
        self.prov[t] = sum(p.provisioned for p in pools.values())
        self.ready[t] = sum(p.ready for p in pools.values())
        self.late[t], self.queue[t], self.wait[t], self.warmed[t], self.caps[t] = late, q, wait, warm, per_instance
        self.slow[t] = lat.late
        self.p99[t] = math.inf if lat.fleet_p99_s is None else 1000.0 * lat.fleet_p99_s
        if not self.profiles:
            return
        self.in_switch[t], self.extra[t] = switching, max(0, self.prov[t] - planner) if switching else 0.0
        # a backlog carried into a switch is the planner's until it has drained once
        self.carried[t] = switching and q0 > 0.5 and (t == 0 or not self.in_switch[t - 1] or self.carried[t - 1])
        st = switch_state(policy)
        self.canary[t] = canary_share(st, request_shares(policy.cfg.switch, st, {n: p.ready for n, p in pools.items()}))

    def run(self, policy: Any, pools: dict[str, Pool], sleep: Optional[SleepPool], curves: Any) -> FleetRun:
        sw = self.profiles
        return FleetRun(
            name=getattr(policy, "name", "policy"), provisioned=self.prov, ready=self.ready, late=self.late,
            queue=self.queue, max_wait=self.wait,
            launches=sum(p.launches for p in pools.values()) + (sleep.launches if sleep is not None else 0),
            capacity=self.caps if np.any(self.caps != self.capacity_rpm) else None,
            standby=self.standby if sleep is not None else None, wakes=sleep.wakes if sleep is not None else 0,
            switching=self.in_switch if sw else None, switch_extra=self.extra if sw else None,
            switch_carried=self.carried if sw else None, latency_late=self.slow if curves else None,
            ttft_p99_ms=self.p99 if curves else None, canary_share=self.canary if sw else None,
            warmup_requests=self.warmed)


def profiled(policy: Any) -> bool:
    """Whether the policy names replicas per profile (``warmup.sim.switches.ProfilePolicy``, the
    replay's tick) for a core that switches between profiles of different capacity."""
    return hasattr(policy, "decide_profiles") and uses_profiles(policy.cfg)


def _active(policy: Any) -> str:
    return policy.active if profiled(policy) else SINGLE


def _pools(policy: Any, initial_ready: int) -> dict[str, Pool]:
    if not profiled(policy):
        return {SINGLE: Pool(ready=int(initial_ready))}
    pools = {name: Pool() for name, _ in policy.cfg.switch.profile_capacity}
    pools.setdefault(policy.active, Pool()).ready = int(initial_ready)
    return pools


def _capacity(policy: Any, pool: str, params: FleetParams) -> float:
    """A ready instance's requests per minute in ``pool``: its profile's, else the policy's own
    capacity now (a canary mixes it), else the fleet's."""
    if profiled(policy):
        return float(policy.capacity_of(pool))
    now = getattr(policy, "capacity_now", None)
    return float(now()) if now is not None else params.capacity_rpm


def _apply(policy: Any, obs: Observation, pools: dict[str, Pool], sleep: Optional[SleepPool], t: int, B: int,
           k: int) -> tuple[int, bool, int, int]:
    """Decide and resize: (the planner's count, whether a switch runs, instances woken, the step
    from which they serve).  Pools that grow go first, as the live backend starts before it stops."""
    if profiled(policy):
        want, planner, switching = policy.decide_profiles(obs, pools)
    else:
        planner, switching = max(0, int(policy.decide(obs))), False
        want = {SINGLE: planner}
    woke, k_wake, active = 0, k, _active(policy)
    for name in sorted(want, key=lambda n: want[n] <= pools.setdefault(n, Pool()).provisioned):
        n, pool = max(0, int(want[name])), pools[name]
        if sleep is not None and name == active:
            pool.ready, launched, woke, k_wake = sleep_resize(sleep, policy, n, pool.ready, pool.booting, t, B, k)
        else:
            launched = pool.resize(n, t, B)
        pool.launches += launched
    return planner, switching, woke, k_wake


def _warmup_load(policy: Any, t: int, pools: dict[str, Pool]) -> float:
    """Requests the policy's warmups take in minute ``t`` (after the minute's launches)."""
    take = getattr(policy, "warmup_load", None)
    return float(take(t, {n: list(p.booting) for n, p in pools.items()})) if take is not None else 0.0


def _serve(q: float, steps: list, rpm: float, woke_rpm: float, k_wake: int, warm: float, dt: float,
           w: float, trail: Optional[list] = None) -> tuple[float, float, float]:
    """One minute served by the ready instances, less the capacity warmup requests take; those woken
    this minute (``woke_rpm`` of the total) serve from step ``k_wake``."""
    mu = max(0.0, rpm - warm) / 60.0
    if woke_rpm <= 0.0:
        return serve_minute(q, steps, mu, dt, w, trail)
    q, late0, wait0 = serve_minute(q, steps[:k_wake], max(0.0, rpm - woke_rpm - warm) / 60.0, dt, w, trail)
    q, late, wait = serve_minute(q, steps[k_wake:], mu, dt, w, trail)
    return q, late + late0, max(wait, wait0)


def _latency(policy: Any, curves: Optional[Mapping[str, LatencyCurve]], pools: dict[str, Pool], demand: float,
             late: float, wait: float, w: float) -> MinuteLatency:
    if not curves:
        return NONE
    ready = {n: p.ready for n, p in pools.items()}
    st = switch_state(policy)
    weighted = (request_shares(policy.cfg.switch, st, ready)
                if profiled(policy) and policy.cfg.switch.routing == "weights" else None)
    return minute_latency(curves, ready, demand, late, wait, w, weighted)


def make_pool(policy: Policy, params: FleetParams) -> Optional[SleepPool]:
    """The asleep pool where the fleet has an asleep tier and the policy keeps one."""
    if params.wake_s is None or not hasattr(policy, "asleep_target"):
        return None
    return SleepPool(params.wake_s, params.boot_minutes)


def sleep_resize(pool: SleepPool, policy: Policy, want: int, ready: int, booting: list[int], t: int, B: int,
                 k: int) -> tuple[int, int, int, int]:
    """(ready, launched, woken, step from which the woken serve): wake before launching, put what a
    scale-in drops to sleep up to the policy's asleep target, then fill or trim the pool."""
    have = ready + len(booting)
    woke = pool.wake(want - have) if want > have and pool.wake_s < B * 60.0 else 0
    k_wake = pool.wake_steps(k)
    if woke and k_wake >= k:  # a wake of a minute or more: it joins the booting instances
        booting.extend([t + int(math.ceil(pool.wake_s / 60.0 - 1e-9))] * woke)
        booting.sort()
        woke = 0  # counted among the booting now, so ``want`` already covers them
    before = ready
    ready, launched = resize(want - woke, ready, booting, t, B)
    target = int(policy.asleep_target())
    if want < have:
        pool.absorb(before - ready, target)
    pool.fill(target, t)
    return ready + woke, launched, woke, k_wake
