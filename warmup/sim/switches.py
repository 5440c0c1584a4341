"""Profile switches in the fleet simulator: one pool of instances per profile.

A switch is what it is live: launches of the target profile (each ready one cold start later,
serving that profile's capacity) and removals of the old one, as the core's switch decision
gives them (:func:`warmup.core.switch_capacity.split`: old replicas go only as target ones are
ready; a rollback restores the old ones before the target goes).  Outside a switch the planner's
count goes to the active profile.  Every minute the ready instances of all pools serve one FIFO
queue at their own profile's capacity.

The report per policy adds the GPU-hours the switches cost (provisioned above what the planner
alone wanted, in minutes a switch runs), the requests late in those minutes, and of those the ones
the switches caused: late in a switch minute after any backlog carried into the switch had
drained (a queue there before the switch began is the planner's shortfall, not the switch's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from warmup.core import CoreConfig, Instance, InstanceState
from warmup.core.state import SwitchPhase, SwitchState
from warmup.core.switch_capacity import request_shares
from warmup.core.switching import IN_SWITCH
from warmup.sim.fleet import FleetParams, FleetRun, Observation, boot_finished, resize, serve_minute
from warmup.sim.latency import LatencyCurve
from warmup.sim.mixed_latency import NONE, minute_latency
from warmup.sim.policies import CorePolicy


@dataclass
class Pool:
    """The instances of one profile: ready ones and the ready-minute of each booting one."""

    ready: int = 0
    booting: list[int] = field(default_factory=list)

    def advance(self, t: int) -> None:
        self.ready += boot_finished(self.booting, t)

    def resize(self, want: int, t: int, boot_minutes: int) -> int:
        """Launch or remove (booting newest first, then ready) to reach ``want``; launches made."""
        self.ready, launched = resize(want, self.ready, self.booting, t, boot_minutes)
        return launched

    @property
    def provisioned(self) -> int:
        return self.ready + len(self.booting)


class ProfilePolicy(CorePolicy):
    """The decision core with instances tagged by profile; it names replicas per profile."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pools: dict[str, Pool] = {}

    def capacity_of(self, profile: str) -> float:
        return self.cfg.switch.capacity_of(profile, self.cfg.scaling.capacity_rpm)

    @property
    def active(self) -> str:
        return self.state.switch.active_profile or self.cfg.switch.default_profile

    def _instances(self, ready: int, booting: int, asleep: int = 0) -> tuple[Instance, ...]:
        """The pools' instances tagged by profile (profile pools keep no asleep tier)."""
        out: list[Instance] = []
        for p, pool in self._pools.items():
            out += [Instance(f"{p}-r{i}", InstanceState.READY_BUSY, profile=p) for i in range(pool.ready)]
            out += [Instance(f"{p}-b{i}", InstanceState.BOOTING, profile=p) for i in range(len(pool.booting))]
        return tuple(out)

    def switch_state(self) -> SwitchState:
        return self.state.switch

    def decide_profiles(self, obs: Observation, pools: dict[str, Pool]) -> tuple[dict[str, int], int, bool]:
        """(replicas per profile, the planner's own count, whether a switch runs) for minute ``obs.t``."""
        self._pools = pools
        desired = self.decide(obs)
        return profile_targets(self.last.switch.replicas, desired, self.active, pools,
                               self.state.switch.phase in IN_SWITCH)


def profile_targets(replicas: tuple[tuple[str, int], ...], desired: int, active: str, pools: dict[str, Pool],
                    switching: bool) -> tuple[dict[str, int], int, bool]:
    """(replicas per profile, the planner's count, whether a switch runs) from one tick's output, as
    the live tick applies it: a switch's replicas per profile when it gives them, else the planner's
    count on the active profile and none on the others."""
    if replicas:
        return {**{p: pools[p].provisioned for p in pools}, **dict(replicas)}, desired, switching
    want = {p: 0 for p in pools}
    want[active] = desired
    return want, desired, switching


def run_profiles(policy: ProfilePolicy, arrivals: np.ndarray, minute_before: float, params: FleetParams,
                 initial_ready: int, observed: Optional[np.ndarray] = None,
                 curves: Optional[Mapping[str, LatencyCurve]] = None) -> FleetRun:
    """Run the profile-aware core over the test part; ``arrivals`` shape (minutes, steps_per_minute).
    With calibrated ``curves`` per profile, each minute's TTFT per profile (round robin,
    ``warmup.sim.mixed_latency``) is what the next minute's tick reads as P99, as a scrape would give
    it, and the requests it makes late are counted."""
    T, k = arrivals.shape
    dt, w, B = 60.0 / k, params.wait_threshold_s, params.boot_minutes
    pools = {name: Pool() for name, _ in policy.cfg.switch.profile_capacity}
    pools.setdefault(policy.active, Pool()).ready = int(initial_ready)
    prov, rdy = np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
    late, queue, mw, caps = np.zeros(T), np.zeros(T), np.zeros(T), np.full(T, params.capacity_rpm)
    in_switch, extra, carried = np.zeros(T, dtype=bool), np.zeros(T), np.zeros(T, dtype=bool)
    slow, p99, canary, warmed = np.zeros(T), np.full(T, np.inf), np.full(T, np.nan), np.zeros(T)
    warm_fn = getattr(policy, "warmup_load", None)   # requests its warmups send in a minute
    q, last, last_wait, launches, lat = 0.0, minute_before, 0.0, 0, NONE
    rows, sums = arrivals.tolist(), arrivals.sum(axis=1).tolist()
    for t in range(T):
        for pool in pools.values():
            pool.advance(t)
        ready = sum(p.ready for p in pools.values())
        seen = last if observed is None else float(observed[t])   # a coarse series: its last ended bin
        obs = Observation(t, seen, q, ready, sum(len(p.booting) for p in pools.values()), last_wait,
                          p99_s=lat.fleet_p99_s, p99_by_profile=lat.p99_by_profile)
        want, planner, switching = policy.decide_profiles(obs, pools)
        for name in sorted(want, key=lambda n: want[n] <= pools.setdefault(n, Pool()).provisioned):
            launches += pools[name].resize(max(0, int(want[name])), t, B)
        rpm = sum(p.ready * policy.capacity_of(n) for n, p in pools.items())
        # warmup requests take serving capacity, as in run_online (issue 42: the profile loop charged none)
        warm = float(warm_fn(t, {n: list(p.booting) for n, p in pools.items()})) if warm_fn else 0.0
        warmed[t] = warm
        prov[t] = sum(p.provisioned for p in pools.values())
        rdy[t] = sum(p.ready for p in pools.values())
        caps[t] = rpm / rdy[t] if rdy[t] else params.capacity_rpm
        in_switch[t], extra[t] = switching, max(0, prov[t] - planner) if switching else 0.0
        # a backlog carried into a switch is the planner's until it has drained once
        carried[t] = switching and q > 0.5 and (t == 0 or not in_switch[t - 1] or carried[t - 1])
        q, late[t], mw[t] = serve_minute(q, rows[t], max(0.0, rpm - warm) / 60.0, dt, w)
        queue[t], last, last_wait = q, sums[t], mw[t]
        ready_now = {n: p.ready for n, p in pools.items()}
        shares = request_shares(policy.cfg.switch, switch_state(policy), ready_now)
        canary[t] = _canary_share(switch_state(policy), shares)
        if curves:
            weighted = shares if policy.cfg.switch.routing == "weights" else None
            lat = minute_latency(curves, ready_now, sums[t], late[t], mw[t], w, weighted)
            slow[t] = lat.late
            p99[t] = math.inf if lat.fleet_p99_s is None else 1000.0 * lat.fleet_p99_s
    return FleetRun(name=policy.name, provisioned=prov, ready=rdy, late=late, queue=queue, max_wait=mw,
                    launches=launches, capacity=caps, switching=in_switch, switch_extra=extra,
                    switch_carried=carried, latency_late=slow if curves else None,
                    ttft_p99_ms=p99 if curves else None, canary_share=canary, warmup_requests=warmed)


def switch_state(policy: Any) -> Optional[SwitchState]:
    """The switch machine's state after the policy's last tick (None: a policy that keeps none)."""
    read = getattr(policy, "switch_state", None)
    return read() if read is not None else None


def _canary_share(st: Optional[SwitchState], shares: Mapping[str, float]) -> float:
    """The target's share of the requests while the canary runs (NaN outside it)."""
    if st is None or st.phase is not SwitchPhase.CANARY or not st.target_profile:
        return math.nan
    return float(shares.get(st.target_profile, 0.0))


def uses_profiles(cfg: CoreConfig) -> bool:
    """Whether the core switches between profiles of different capacity (then pools per profile)."""
    return cfg.switch.enabled and len(cfg.switch.profile_capacity) > 1
