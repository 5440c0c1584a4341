"""The simulator's fleet as a scaler backend, for ``warmcast replay``.

Each replayed minute the simulator's one loop (``warmup.sim.loop.run_online``, profiles or not)
shows this backend what a controller would see at the start
of the minute (:meth:`ReplayFleet.observe`); the workers' own tick reads it as live signals,
decides, and applies through the same calls it makes on any backend (``scale_to``, ``wake``,
``set_asleep``, ``set_replicas``, ``warm``).  The backend only records those targets: the
simulator's physics then launch, wake, remove and serve, exactly as for the simulator's own
predictive policy, so the two runs differ in nothing but who decided.

Each instance keeps one id from launch to removal (``i0``..; ``<profile>-i0``.. with profiles; a
ledger per pool, :mod:`warmup.sim.ledger`) and shows its launch time while booting, so the signals
step measures the lead from launches it saw, as live; a decision's warmup targets go back to the
simulator's positional ids (``b<i>``: the i-th booting) for its charge rule.  Asleep instances are
``s0``...  The simulated fleet keeps no per-instance warm state; it reports the P99s the simulator shows (with profiles and their calibrated
curves, ``warmup.sim.mixed_latency``; none otherwise, as the simulator's policies see none).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Optional

from warmcast.errors import InputError
from warmup.sim.fleet import Observation
from warmup.sim.ledger import Ledger
from warmup.sim.meter import Meter, MinuteTrace

PUBLISHED = "replayed-fleet"   # the state kind a replay through Celery publishes its fleet under
TARGETS = "replayed-targets"   # what a worker's tick set on it this minute (an acting replay)
CORE = "replayed-core"         # the core configuration the driver decides with, for the worker to use


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
    meter: Optional[Meter] = None                  # count arrivals by scrape rounds (``--scrape-rounds``)
    pending: list = field(default_factory=list)    # the meter's rounds no scrape has read yet
    ledgers: dict[str, Ledger] = field(default_factory=dict)   # per pool: its instances' ids

    def track(self, pools: Mapping[str, Any], t: int) -> None:
        """Follow each pool's instances to minute ``t`` (before :meth:`observe`); those launched since
        the last look were launched at that look's minute (its decision launched them)."""
        launched = self.now.timestamp() if self.now is not None else None
        for name, pool in pools.items():
            ledger = self.ledgers.setdefault(name, Ledger(f"{name}-" if name else ""))
            ledger.update(pool.ready, pool.booting, t, launched)

    def positional(self, ids: Any) -> list[str]:
        """The simulator's ids of ``ids`` (a decision's warmup targets), for its charge rule."""
        out = []
        for iid in ids:
            pos = next((p for p in (lg.position(str(iid)) for lg in self.ledgers.values()) if p), None)
            out.append(pos if pos is not None else str(iid))
        return out

    def meter_minute(self, trace: MinuteTrace, start_s: float) -> None:
        """The instances' readings through the minute just served, for the scrapes to come."""
        if self.meter is not None:
            self.pending += self.meter.rounds(trace, start_s)

    def due_rounds(self, now_s: float) -> list:
        """The rounds a scrape has read by ``now_s``: those before it.  The round at the minute's own
        instant is read after that minute's tick (beat sends both in one slot and the tick may run
        first: the worst case, which the tick's reading of a partly counted minute must survive)."""
        due = [r for r in self.pending if r[0] < now_s - 1e-6]
        self.pending = self.pending[len(due):]
        return due

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
        ts = self.now.timestamp() if now is None else now
        doc = {"ts": ts, "source": "replay",
               "queue_depth": obs.queue_depth, "observed_rpm": obs.last_minute_rpm, "p99_s": obs.p99_s,
               "p99_by_profile": dict(obs.p99_by_profile),
               "running": None, "instances": insts, "ready": obs.ready, "provisioned": obs.provisioned,
               "warmups": self.warmed, "errors": {}}
        if self.meter is not None:   # the signals step counts these as the live scrape counts its rounds
            doc["rounds"] = self.due_rounds(ts)
        return doc

    def _instances(self) -> list[dict[str, Any]]:
        def one(iid: str, state: str, profile: str, launched: Optional[float] = None) -> dict[str, Any]:
            return {"id": iid, "url": None, "state": state, "profile": profile, "load_rpm": 0.0, "warmed": False,
                    "launched_at": launched, "waiting": None, "running": None}

        def pool(name: str, profile: str, ready: int, booting: int) -> list[dict[str, Any]]:
            lg = self.ledgers.get(name)
            if lg is None or len(lg.ready) != ready or len(lg.booting) != booting:
                raise RuntimeError(f"replayed fleet: the ids of pool {name!r} were not followed to this minute "
                                   "(ReplayFleet.track is called before observe)")
            return ([one(i, "ready_busy", profile) for i in lg.ready]
                    + [one(i, "booting", profile, at) for i, _, at in lg.booting])

        if self.pools is not None:
            out = []
            for p, pl in self.pools.items():
                out += pool(p, p, pl.ready, len(pl.booting))
            return out + [one(f"{self.active}-s{i}", "asleep", self.active) for i in range(self.obs.asleep)]
        o = self.obs
        return pool("", self.profile, o.ready, o.booting) + [one(f"s{i}", "asleep", self.profile)
                                                            for i in range(o.asleep)]


def publish(state: Any, dep: str, fleet: ReplayFleet, acting: bool = False) -> None:
    """What ``fleet`` shows this minute, stored for a worker process to read (:class:`StoredFleet`).
    ``acting``: the driver reads back what the worker's tick sets (:func:`take_targets`); the
    targets of the minute before are cleared."""
    pools = {p: pool.provisioned for p, pool in (fleet.pools or {}).items()}
    state.put(PUBLISHED, dep, {"signals": fleet.signals(), "current": fleet.current(), "acting": acting,
                               "provisioned_by_profile": pools})
    if acting:
        state.put(TARGETS, dep, {})


def take_targets(state: Any, dep: str, fleet: ReplayFleet) -> dict[str, Any]:
    """What a worker's tick set on the published fleet this minute, onto the driver's ``fleet``."""
    t = state.get(TARGETS, dep) or {}
    if "target" in t:
        fleet.target = int(t["target"])
    if "replicas" in t:
        fleet.replicas = {p: int(n) for p, n in t["replicas"].items()}
    if "asleep_target" in t:
        fleet.asleep_target = int(t["asleep_target"])
    fleet.woken = tuple(t.get("woken", ()))
    fleet.warmed += int(t.get("warmed", 0))
    fleet.calls += list(t.get("calls", ()))
    return t


class StoredFleet:
    """The fleet a replay driver published this minute, as a worker process's backend
    (``WARMCAST_WORKERS_REPLAYED_FLEET``).  A shadow replay publishes it read only (the workers run
    forecast-only and apply nothing); an acting replay (``warmcast replay --through-worker``) lets the
    tick set targets, which the driver reads back (:func:`take_targets`) and its simulator applies."""

    def __init__(self, state: Any, dep: str) -> None:
        self.state, self.dep = state, dep

    def _doc(self) -> dict[str, Any]:
        doc = self.state.get(PUBLISHED, self.dep)
        if doc is None:
            raise InputError(f"no replayed fleet published for deployment {self.dep!r}: the replay driver "
                             "publishes it before each tick (workers/shadow_replay.py)")
        return doc

    def _targets(self) -> dict[str, Any]:
        return self.state.get(TARGETS, self.dep) or {}

    def _act(self, call: str, **fields: Any) -> None:
        if not self._doc().get("acting"):
            raise InputError(f"the replayed fleet of {self.dep!r} is read only: run the workers in forecast-only "
                             "mode (WARMCAST_DRY_RUN=true) to shadow a replay")
        t = self._targets()
        t.update(fields, calls=[*t.get("calls", ()), call])
        self.state.put(TARGETS, self.dep, t)

    def current(self) -> int:
        target = self._targets().get("target")
        return int(self._doc()["current"]) if target is None else int(target)

    def signals(self, now: Optional[float] = None) -> dict[str, Any]:
        return dict(self._doc()["signals"])

    def scale_to(self, n: int, reason: str = "", remove: tuple[str, ...] = ()) -> dict[str, Any]:
        before = self.current()
        self._act(f"scale_to {n}", target=int(n))
        return {"before": before, "after": int(n)}

    def wake(self, ids: list[str]) -> int:
        self._act(f"wake {len(ids)}", woken=[str(i) for i in ids])
        return len(ids)

    def set_asleep(self, target: int) -> int:
        self._act(f"set_asleep {target}", asleep_target=int(target))
        return int(target)

    def set_replicas(self, want: dict[str, int], reason: str = "", active: Optional[str] = None) -> dict[str, Any]:
        have = self._doc().get("provisioned_by_profile", {})
        replicas = {p: int(n) for p, n in want.items()}
        self._act(f"set_replicas {replicas}", replicas=replicas)
        return {"started": sum(max(0, n - have.get(p, 0)) for p, n in replicas.items()),
                "stopped": sum(max(0, have.get(p, 0) - n) for p, n in replicas.items())}

    def set_weights(self, weights: dict[str, int]) -> dict[str, Any]:
        self._act(f"set_weights {dict(weights)}")
        return {"weights": dict(weights)}

    def warm(self, ids: list[str], requests: int, duration_s: float = 60.0) -> int:
        self._act(f"warm {len(ids)}", warmed=int(self._targets().get("warmed", 0)) + len(ids))
        return len(ids)
