"""The simulator's fleet as a scaler backend, for ``warmcast replay``.

Each replayed minute the simulator's one loop (``warmup.sim.loop.run_online``, profiles or not)
shows this backend what a controller would see at the start
of the minute (:meth:`ReplayFleet.observe`); the workers' own tick reads it as live signals,
decides, and applies through the same calls it makes on any backend (``scale_to``, ``wake``,
``set_asleep``, ``set_replicas``, ``warm``).  The backend only records those targets: the
simulator's physics then launch, wake, remove and serve, exactly as for the simulator's own
predictive policy, so the two runs differ in nothing but who decided.

Instance ids are the simulator's own (``r0``.., ``b0``.., ``s0``..; ``<profile>-r0``.. with
profiles) so a decision's ids name the same instances on both sides.  The simulated fleet keeps no
per-instance warm state; it reports the P99s the simulator shows (with profiles and their calibrated
curves, ``warmup.sim.mixed_latency``; none otherwise, as the simulator's policies see none).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Optional

from warmcast.errors import InputError
from warmup.sim.fleet import Observation

PUBLISHED = "replayed-fleet"   # the state kind a replay through Celery publishes its fleet under


@dataclass
class ReplayFleet:
    capacity_rpm: float
    profile: str = ""
    obs: Optional[Observation] = None
    pools: Optional[Mapping[str, Any]] = None     # the simulator's pools per profile (run_online)
    now: Optional[datetime] = None
    target: Optional[int] = None                   # this minute's scale target, when the tick set one
    replicas: Optional[dict[str, int]] = None      # this minute's replicas per profile (a switch)
    asleep_target: int = 0
    active: str = ""                               # the profile asleep instances run, with profile pools
    woken: tuple[str, ...] = ()
    warmed: int = 0
    calls: list[str] = field(default_factory=list)

    def observe(self, obs: Observation, now: datetime, pools: Optional[Mapping[str, Any]] = None,
                active: Optional[str] = None) -> None:
        """The fleet at the start of a minute (with profile pools, ``active`` the profile its asleep
        instances run); the targets of the minute before are cleared."""
        self.obs, self.now, self.pools = obs, now, pools
        self.active = active if active is not None else self.profile
        self.target, self.replicas, self.woken = None, None, ()

    # ------------------------------------------------------------ the scaler interface
    def current(self) -> int:
        if self.target is not None:
            return self.target
        if self.pools is not None:
            return sum(p.provisioned for p in self.pools.values())
        return self.obs.provisioned

    def scale_to(self, n: int, reason: str = "", remove: tuple[str, ...] = ()) -> dict[str, Any]:
        before = self.current()
        self.target = int(n)
        self.calls.append(f"scale_to {n}")
        return {"before": before, "after": self.target}

    def wake(self, ids: list[str]) -> int:
        self.woken = tuple(ids)
        self.calls.append(f"wake {len(ids)}")
        return len(ids)

    def set_asleep(self, target: int) -> int:
        self.asleep_target = int(target)
        return self.asleep_target

    def set_replicas(self, want: dict[str, int], reason: str = "", active: Optional[str] = None) -> dict[str, Any]:
        have = {p: pool.provisioned for p, pool in (self.pools or {}).items()}
        self.replicas = {p: int(n) for p, n in want.items()}
        self.calls.append(f"set_replicas {self.replicas}")
        return {"started": sum(max(0, n - have.get(p, 0)) for p, n in self.replicas.items()),
                "stopped": sum(max(0, have.get(p, 0) - n) for p, n in self.replicas.items())}

    def set_weights(self, weights: dict[str, int]) -> dict[str, Any]:
        """A weighted route's weights: recorded; the simulator routes the minute by the same switch state."""
        self.calls.append(f"set_weights {dict(weights)}")
        return {"weights": dict(weights)}

    def warm(self, ids: list[str], requests: int, duration_s: float = 60.0) -> int:
        self.warmed += len(ids)
        return len(ids)

    # ------------------------------------------------------------ signals
    def signals(self, now: Optional[float] = None) -> dict[str, Any]:
        """The signals document the workers store, from what the simulator shows this minute."""
        obs = self.obs
        insts = self._instances()
        return {"ts": self.now.timestamp() if now is None else now, "source": "replay",
                "queue_depth": obs.queue_depth, "observed_rpm": obs.last_minute_rpm, "p99_s": obs.p99_s,
                "p99_by_profile": dict(obs.p99_by_profile),
                "running": None, "instances": insts, "ready": obs.ready, "provisioned": obs.provisioned,
                "warmups": self.warmed, "errors": {}}

    def _instances(self) -> list[dict[str, Any]]:
        def one(iid: str, state: str, profile: str) -> dict[str, Any]:
            return {"id": iid, "url": None, "state": state, "profile": profile, "load_rpm": 0.0, "warmed": False,
                    "launched_at": None, "waiting": None, "running": None}

        if self.pools is not None:
            out = []
            for p, pool in self.pools.items():
                out += [one(f"{p}-r{i}", "ready_busy", p) for i in range(pool.ready)]
                out += [one(f"{p}-b{i}", "booting", p) for i in range(len(pool.booting))]
            return out + [one(f"{self.active}-s{i}", "asleep", self.active) for i in range(self.obs.asleep)]
        o = self.obs
        return ([one(f"r{i}", "ready_busy", self.profile) for i in range(o.ready)]
                + [one(f"b{i}", "booting", self.profile) for i in range(o.booting)]
                + [one(f"s{i}", "asleep", self.profile) for i in range(o.asleep)])


def publish(state: Any, dep: str, fleet: ReplayFleet) -> None:
    """What ``fleet`` shows this minute, stored for a worker process to read (:class:`StoredFleet`)."""
    state.put(PUBLISHED, dep, {"signals": fleet.signals(), "current": fleet.current()})


class StoredFleet:
    """The fleet a replay driver published this minute, as a worker process's backend
    (``WARMCAST_WORKERS_REPLAYED_FLEET``).  Read only: a replay through Celery runs the workers in
    forecast-only mode (the shadow replay), so the tick reads the fleet and applies nothing."""

    def __init__(self, state: Any, dep: str) -> None:
        self.state, self.dep = state, dep

    def _doc(self) -> dict[str, Any]:
        doc = self.state.get(PUBLISHED, self.dep)
        if doc is None:
            raise InputError(f"no replayed fleet published for deployment {self.dep!r}: the replay driver "
                             "publishes it before each tick (workers/shadow_replay.py)")
        return doc

    def current(self) -> int:
        return int(self._doc()["current"])

    def signals(self, now: Optional[float] = None) -> dict[str, Any]:
        return dict(self._doc()["signals"])

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise InputError(f"the replayed fleet of {self.dep!r} is read only: run the workers in forecast-only "
                         "mode (WARMCAST_DRY_RUN=true) to shadow a replay")

    scale_to = wake = set_asleep = set_replicas = warm = _read_only
