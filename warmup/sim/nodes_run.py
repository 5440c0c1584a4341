"""Many deployments on one node pool, minute by minute (issue 45): each deployment's policy and
queue as the fleet model runs them (``warmup.sim.fleet``), its launches placed on the pool's nodes
(``warmup.sim.nodes``: two cold starts), and the pool's warm GPUs from a rule (none: nodes only for
launches that need them; a fixed balloon count; the fleet decision of ``warmup.core.nodes``).

Each minute: nodes whose boot ended come up; each deployment's booting instances whose minute came
are ready; each policy sees what a controller would see and names its count; launches are placed
(free GPU: the instance lead; else a booting node's or a new node's ready minute plus the instance
lead), scale-in cancels the latest-ready booting instances first, then ready ones; the pool keeps
its warm GPUs and removes unneeded nodes; each deployment's minute is served by its ready instances.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from warmup.sim.fleet import FleetRun, Observation, Policy, serve_minute
from warmup.sim.nodes import NodeParams, Nodes


@dataclass
class Member:
    """One deployment on the pool: its policy, arrivals (minutes x steps), capacity, GPUs per
    instance and instance lead."""

    name: str
    policy: Policy
    arrivals: np.ndarray
    capacity_rpm: float
    gpus: int = 1
    instance_lead_min: int = 3
    initial_ready: int = 1
    minute_before: float = 0.0
    wait_threshold_s: float = 5.0


@dataclass
class _Live:
    ready: int
    booting: list[tuple[int, int]] = field(default_factory=list)   # (ready minute, its node's ready minute)
    queue: float = 0.0
    last: float = 0.0
    last_wait: float = 0.0


class WarmRule(Protocol):
    def warm(self, t: int, members: Sequence[Member], live: Sequence[_Live]) -> int: ...


@dataclass
class NodesRun:
    runs: dict[str, FleetRun]
    nodes: np.ndarray          # nodes up or booting per minute
    warm: np.ndarray           # warm GPUs asked for per minute
    free: np.ndarray           # free GPUs on running nodes per minute
    pool: Nodes


def run_nodes(members: Sequence[Member], params: NodeParams, rule: Optional[WarmRule] = None,
              fill: bool = False) -> NodesRun:
    """Run every member's policy on one node pool over the test part."""
    T = min(m.arrivals.shape[0] for m in members)
    pool = Nodes(params)
    live = [_Live(m.initial_ready, last=m.minute_before) for m in members]
    pool.held = sum(m.gpus * m.initial_ready for m in members)
    pool.up = min(params.max_nodes, -(-pool.held // params.gpus_per_node))
    rec = {m.name: _record(T) for m in members}
    nodes, warm, free = np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
    for t in range(T):
        pool.settle(t)
        for m, s in zip(members, live):
            _step_member(m, s, pool, t, fill, rec[m.name])
        w = int(rule.warm(t, members, live)) if rule is not None else 0
        pool.keep_warm(w, t)
        pool.scale_down(w, t)
        for m, s in zip(members, live):
            _serve(m, s, t, rec[m.name])
        pool.account(fill)
        nodes[t], warm[t], free[t] = pool.up + len(pool.booting), w, pool.free()
    runs = {m.name: FleetRun(name=m.name, provisioned=rec[m.name]["prov"], ready=rec[m.name]["ready"],
                             late=rec[m.name]["late"], queue=rec[m.name]["queue"], max_wait=rec[m.name]["wait"],
                             launches=int(rec[m.name]["launches"][0])) for m in members}
    return NodesRun(runs, nodes, warm, free, pool)


def _record(T: int) -> dict[str, np.ndarray]:
    return {"prov": np.zeros(T, dtype=np.int64), "ready": np.zeros(T, dtype=np.int64), "late": np.zeros(T),
            "queue": np.zeros(T), "wait": np.zeros(T), "launches": np.zeros(1, dtype=np.int64)}


def _step_member(m: Member, s: _Live, pool: Nodes, t: int, fill: bool, rec: dict[str, np.ndarray]) -> None:
    """Ready what finished booting, ask the policy, launch or remove."""
    done = [b for b in s.booting if b[0] <= t]
    if done:
        s.booting = [b for b in s.booting if b[0] > t]
        s.ready += len(done)
    obs = Observation(t, s.last, s.queue, s.ready, len(s.booting), s.last_wait)
    want = max(0, int(m.policy.decide(obs)))
    have = s.ready + len(s.booting)
    if want > have:
        at = pool.place(m.gpus, want - have, t, m.instance_lead_min, batch=fill)
        s.booting = sorted(s.booting + [(r, r - m.instance_lead_min) for r in at])
        rec["launches"][0] += len(at)
    elif want < have:
        _remove(m, s, pool, t, have - want)


def _remove(m: Member, s: _Live, pool: Nodes, t: int, n: int) -> None:
    """Cancel the latest-ready booting instances first (those waiting on a node among them), then ready ones."""
    cut = min(n, len(s.booting))
    gone, s.booting = s.booting[len(s.booting) - cut:], s.booting[:len(s.booting) - cut]
    waiting = sum(1 for _, node_at in gone if node_at > t)
    pool.release(m.gpus, cut, waiting)
    drop = min(n - cut, s.ready)
    s.ready -= drop
    pool.release(m.gpus, drop)


def _serve(m: Member, s: _Live, t: int, rec: dict[str, np.ndarray]) -> None:
    k = m.arrivals.shape[1]
    row = m.arrivals[t].tolist()
    s.queue, late, wait = serve_minute(s.queue, row, s.ready * m.capacity_rpm / 60.0, 60.0 / k, m.wait_threshold_s)
    rec["prov"][t], rec["ready"][t] = s.ready + len(s.booting), s.ready
    rec["late"][t], rec["queue"][t], rec["wait"][t] = late, s.queue, wait
    s.last, s.last_wait = float(sum(row)), wait


@dataclass(frozen=True)
class FixedBalloons:
    """A fixed count of warm GPUs all day (the Cluster Autoscaler's documented overprovisioning)."""

    count: int

    def warm(self, t: int, members: Sequence[Member], live: Sequence[_Live]) -> int:
        return self.count


@dataclass
class FleetDecision:
    """The fleet decision of the core (``warmup.core.nodes.decide_pool``) each minute, from each
    member's forecast at that minute (``forecast_at``: the member's policy's own, where it has one) and
    the utilisation it holds its instances at (``utilisation``)."""

    cfg: object
    origin_of: Callable[[int], object]
    forecast_at: dict[str, Callable[[int], object]]
    utilisation: dict[str, float] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    _state: object = None

    def warm(self, t: int, members: Sequence[Member], live: Sequence[_Live]) -> int:
        from warmup.core.nodes import Member as PoolMember, PoolInput, PoolState, decide_pool

        inputs = tuple(PoolMember(m.name, self.forecast_at[m.name](t) if m.name in self.forecast_at else None,
                                  m.capacity_rpm, m.gpus, m.gpus * (s.ready + len(s.booting)),
                                  self.utilisation.get(m.name, 1.0))
                       for m, s in zip(members, live))
        d = decide_pool(self.cfg, PoolInput(self.origin_of(t), inputs, 0), self._state or PoolState())
        self._state = d.state
        self.reasons.append(d.reason)
        return d.warm_gpus
