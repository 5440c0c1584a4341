"""Profile switches in the fleet simulator: one pool of instances per profile.

A switch is what it is live: launches of the target profile (each ready one cold start later,
serving that profile's capacity) and removals of the old one, as the core's switch decision
gives them (:func:`warmup.core.switch_capacity.split`: old replicas go only as target ones are
ready; a rollback restores the old ones before the target goes).  Outside a switch the planner's
count goes to the active profile.  Every minute the ready instances of all pools serve one FIFO
queue at their own profile's capacity.  The loop is the one every policy runs in
(``warmup.sim.loop.run_online``).

The report per policy adds the GPU-hours the switches cost (provisioned above what the planner
alone wanted, in minutes a switch runs), the requests late in those minutes, and of those the ones
the switches caused: late in a switch minute after any backlog carried into the switch had
drained (a queue there before the switch began is the planner's shortfall, not the switch's).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from warmup.core import CoreConfig, Instance, InstanceState
from warmup.core.state import SwitchPhase, SwitchState
from warmup.core.switching import IN_SWITCH
from warmup.sim.fleet import Observation, Pool
from warmup.sim.policies import CorePolicy


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
        """The pools' instances tagged by profile; the asleep tier holds the active profile's."""
        out: list[Instance] = []
        for p, pool in self._pools.items():
            out += [Instance(f"{p}-r{i}", InstanceState.READY_BUSY, profile=p) for i in range(pool.ready)]
            out += [Instance(f"{p}-b{i}", InstanceState.BOOTING, profile=p) for i in range(len(pool.booting))]
        out += [Instance(f"{self.active}-s{i}", InstanceState.ASLEEP, profile=self.active) for i in range(asleep)]
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


def switch_state(policy: Any) -> Optional[SwitchState]:
    """The switch machine's state after the policy's last tick (None: a policy that keeps none)."""
    read = getattr(policy, "switch_state", None)
    return read() if read is not None else None


def canary_share(st: Optional[SwitchState], shares: Mapping[str, float]) -> float:
    """The target's share of the requests while the canary runs (NaN outside it)."""
    if st is None or st.phase is not SwitchPhase.CANARY or not st.target_profile:
        return math.nan
    return float(shares.get(st.target_profile, 0.0))


def uses_profiles(cfg: CoreConfig) -> bool:
    """Whether the core switches between profiles of different capacity (then pools per profile)."""
    return cfg.switch.enabled and len(cfg.switch.profile_capacity) > 1
