"""A simulated fleet, shared by every worker process through Redis: for ``warmcast run --simulate``,
the loop benchmark and tests that need a fleet without vLLM.

Traffic is a replayed per-minute series (the synthetic generator's) stored in
Redis; instances have a launch time and are ready ``cold_start_min`` after it;
the queue is the fleet simulator's fluid FIFO (:func:`warmup.sim.fleet.serve_step`)
advanced in wall-clock time whenever signals are read or the fleet changes.  Each ready instance
keeps the counters a vLLM shows (:class:`warmup.sim.meter.Meter`), and the signals step counts the
arrivals from them as it counts a live scrape's.
It speaks the scaler interface (``current()``, ``scale_to(n, reason)``) and
gives the same signals document as scraping real instances.

Its physics is the fleet simulator's (issue 42): each ready instance serves its own profile's
capacity; warmup requests take serving capacity by the simulator's rule
(:mod:`warmup.sim.warmups`: a ready target at once, a booting one in the minute it becomes ready,
never after the warmup's deadline); the P99 each profile and the fleet show is read from the
profile's latency curve (the documented default curve at its declared capacity where no
calibration is given, :func:`warmup.sim.latency.default_curve`) at the last minute's load, plus
the queue's wait, as :func:`warmup.sim.mixed_latency.minute_latency` reads it for the simulator.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from typing import Any, Mapping

import pandas as pd
import redis

from warmcast.errors import WarmcastError
from warmup.sim.fleet import serve_step
from warmup.sim.latency import LatencyCurve, with_default_curves
from warmup.sim.meter import Meter
from warmup.sim.mixed_latency import minute_latency

STEP_S = 10.0          # the fluid queue advances in steps of at most this
LATE_WAIT_S = 5.0      # the simulator's late wait (FleetParams.wait_threshold_s)


class SimFleet:
    def __init__(self, client: redis.Redis, prefix: str, deployment: str, capacity_rpm: float,
                 cold_start_min: float, profile: str = "day", wake_s: float | None = None,
                 capacities: Mapping[str, float] | None = None, bound_ms: float = 1000.0 * LATE_WAIT_S,
                 curves: Mapping[str, LatencyCurve] | None = None) -> None:
        self.wake_s = wake_s   # the asleep tier's wake time (None: no sleep mode)
        self.r = client
        self.dep = deployment
        self.capacity_rpm = capacity_rpm
        # each profile's capacity per replica (the default profile's is ``capacity_rpm``) and its curve
        self.capacities = {profile: capacity_rpm, **dict(capacities or {})}
        self.curves = with_default_curves(dict(curves or {}), self.capacities, bound_ms)
        self.cold_start_s = cold_start_min * 60.0
        self.profile = profile
        self.key = f"{prefix}:sim:{deployment}"
        self.traffic_key = f"{prefix}:sim-traffic:{deployment}"
        self.warmups_key = f"{prefix}:sim-warmups:{deployment}"
        self.lock = self.r.lock(f"{prefix}:lock:sim:{deployment}", timeout=10, blocking_timeout=10)
        self._cache: dict[int, float] = {}

    # ------------------------------------------------------------ set-up
    def reset(self, replicas: int, now: float | None = None) -> None:
        """Start with ``replicas`` instances that are already ready and an empty queue, as a fleet that
        has served since the minute before began and that a scrape read then and as that minute ended:
        the first signals carry those two rounds, so the first tick reads the minute before counted,
        as a loop that had been running would (the traffic is loaded first)."""
        now = time.time() if now is None else now
        ready_since = now - self.cold_start_s - 60
        st = {"instances": [self._new(i + 1, ready_since) for i in range(replicas)], "next_id": replicas + 1,
              "queue": 0.0, "updated": now, "warmups": 0}
        ids, start = [i["id"] for i in st["instances"]], 60.0 * (int(now // 60) - 1)
        meter = Meter()
        meter.serve(ids, 0.0, 0.0)
        rounds = [(start, meter.readings())]
        meter.serve(ids, self.rpm_at(int(start // 60)), 0.0)
        rounds.append((start + 60.0, meter.readings()))
        meter.serve(ids, self.rpm_at(int(now // 60)) * (now - start - 60.0) / 60.0, 0.0)
        st["meter"], st["rounds"] = asdict(meter), rounds
        self.r.set(self.key, json.dumps(st))

    def _new(self, n: int, launched: float, profile: str | None = None) -> dict[str, Any]:
        return {"id": f"sim-{n}", "launched_at": launched, "profile": profile or self.profile, "warmed": False}

    def load_traffic(self, series: pd.Series) -> int:
        """Store a per-minute requests series (tz-naive UTC index) to replay."""
        s = series.dropna()
        mins = (s.index.as_unit("ns").asi8 // 60_000_000_000).tolist()
        mapping = {str(m): float(v) for m, v in zip(mins, s.to_numpy(float))}
        self._cache.clear()   # minutes read before are replaced
        for i in range(0, len(mapping), 5000):
            chunk = dict(list(mapping.items())[i:i + 5000])
            self.r.hset(self.traffic_key, mapping=chunk)
        return len(mapping)

    def rpm_at(self, minute: int) -> float:
        if minute not in self._cache:
            v = self.r.hget(self.traffic_key, str(minute))
            if v is None:
                return 0.0  # a minute outside the replay is quiet, and not cached: it may be loaded later
            self._cache[minute] = float(v)
        return self._cache[minute]

    def traffic(self, start_minute: int, end_minute: int) -> dict[int, float]:
        keys = [str(m) for m in range(start_minute, end_minute)]
        vals = self.r.hmget(self.traffic_key, keys) if keys else []
        return {int(k): float(v) for k, v in zip(keys, vals) if v is not None}

    # ------------------------------------------------------------ state
    def _load(self) -> dict[str, Any]:
        raw = self.r.get(self.key)
        if raw is None:
            self.reset(1)
            raw = self.r.get(self.key)
        return json.loads(raw)

    def _ready_at(self, i: dict[str, Any]) -> float:
        """When an instance serves: one cold start after its launch, or its wake time once woken."""
        return i.get("ready_at", i["launched_at"] + self.cold_start_s)

    def _is_ready(self, i: dict[str, Any], t: float) -> bool:
        return not i.get("asleep") and t >= self._ready_at(i)

    def _ready(self, st: dict[str, Any], t: float) -> int:
        return sum(1 for i in st["instances"] if self._is_ready(i, t))

    def _capacity_of(self, i: dict[str, Any]) -> float:
        return self.capacities.get(i["profile"], self.capacity_rpm)

    def _serving_rpm(self, st: dict[str, Any], t: float) -> float:
        """What the ready instances serve in the minute of ``t``, less what warmups take in it."""
        ready = sum(self._capacity_of(i) for i in st["instances"] if self._is_ready(i, t))
        return max(0.0, ready - float(st.get("warm_load", {}).get(str(int(t // 60)), 0.0)))

    def _awake(self, st: dict[str, Any]) -> list[dict[str, Any]]:
        return [i for i in st["instances"] if not i.get("asleep")]

    def _advance(self, st: dict[str, Any], now: float) -> None:
        t = float(st["updated"])
        q = float(st["queue"])
        meter = Meter(**st.get("meter", {}))   # each ready instance's counters (reset's, then served)
        while t < now - 1e-6:
            dt = min(STEP_S, now - t, 60.0 - (t % 60.0))
            rate = self.rpm_at(int(t // 60)) / 60.0
            q, _, _ = serve_step(q, rate * dt, self._serving_rpm(st, t) / 60.0, dt, LATE_WAIT_S)
            meter.serve([i["id"] for i in st["instances"] if self._is_ready(i, t)], rate * dt, q)
            t += dt
        st["queue"], st["updated"] = q, max(now, float(st["updated"]))
        st["meter"] = asdict(meter)
        done = str(int(now // 60) - 2)   # charges of minutes served are kept a minute, then dropped
        st["warm_load"] = {m: v for m, v in st.get("warm_load", {}).items() if int(m) >= int(done)}

    def _mutate(self, fn, now: float | None = None):
        now = time.time() if now is None else now
        with self.lock:
            st = self._load()
            self._advance(st, now)
            out = fn(st, now)
            self.r.set(self.key, json.dumps(st))
        return out

    # ------------------------------------------------------------ scaler interface
    def current(self) -> int:
        """Instances provisioned: asleep ones are not (the core counts them apart)."""
        return len(self._awake(self._load()))

    def scale_to(self, n: int, reason: str = "", remove: tuple[str, ...] = (),
                 now: float | None = None) -> dict[str, Any]:
        def change(st, now):
            awake = self._awake(st)
            before = len(awake)
            for _ in range(n - before):
                st["instances"].append(self._new(st["next_id"], now))
                st["next_id"] += 1
            if before > n:
                order = {iid: k for k, iid in enumerate(remove)}
                # the core's order first, then the newest booting ones
                gone = sorted(awake, key=lambda i: (order.get(i["id"], len(order)), -i["launched_at"]))
                drop = {i["id"] for i in gone[:before - n]}
                st["instances"] = [i for i in st["instances"] if i["id"] not in drop]
            return {"before": before, "after": len(self._awake(st))}
        return self._mutate(change, now)

    # ------------------------------------------------------------ the asleep tier (sleep mode)
    def wake(self, ids: list[str]) -> int:
        """Wake the named asleep instances: each serves ``wake_s`` from now (not before its own boot ends)."""
        def up(st, now):
            n = 0
            for i in st["instances"]:
                if i["id"] in ids and i.get("asleep"):
                    i["asleep"] = False
                    i["ready_at"] = max(now + float(self.wake_s or 0.0), i["launched_at"] + self.cold_start_s)
                    n += 1
            return n
        return self._mutate(up)

    def set_asleep(self, target: int) -> int:
        """Keep ``target`` instances asleep: launch the missing ones (they boot, then sleep), remove the
        surplus (newest first); returns how many are asleep after."""
        if self.wake_s is None:
            raise WarmcastError(f"simulated fleet {self.dep}: no sleep mode (the deployment has no sleep: key)")

        def keep(st, now):
            asleep = sorted((i for i in st["instances"] if i.get("asleep")), key=lambda i: -i["launched_at"])
            for _ in range(target - len(asleep)):
                st["instances"].append({**self._new(st["next_id"], now), "asleep": True})
                st["next_id"] += 1
            drop = {i["id"] for i in asleep[:max(0, len(asleep) - target)]}
            st["instances"] = [i for i in st["instances"] if i["id"] not in drop]
            return sum(1 for i in st["instances"] if i.get("asleep"))
        return self._mutate(keep)

    def warm(self, instance_ids: list[str], requests: int, duration_s: float = 60.0, now: float | None = None) -> int:
        """Warm the named instances: each takes ``requests`` of serving capacity in the minute it is
        warmed (at once if ready, when it becomes ready if that is before the warmup's deadline,
        else never, as the live sender does); returns how many it touched."""
        def mark(st, now):
            hit = 0
            charges = st.setdefault("warm_load", {})
            for inst in st["instances"]:
                if inst["id"] in instance_ids:
                    at = max(now, self._ready_at(inst))
                    if inst.get("asleep") or at >= now + max(60.0, duration_s):
                        continue   # never answers /health within the warmup: the sender gives up
                    inst["warmed"] = True
                    m = str(int(at // 60))
                    charges[m] = float(charges.get(m, 0.0)) + float(requests)
                    hit += 1
            st["warmups"] += hit
            if hit:
                self.r.xadd(self.warmups_key, {"ts": f"{now:.3f}", "instances": ",".join(instance_ids),
                                               "requests": requests}, maxlen=10_000, approximate=True)
            return hit
        return self._mutate(mark, now)

    def set_replicas(self, want: dict[str, int], reason: str = "", active: str | None = None,
                     now: float | None = None) -> dict[str, Any]:
        """Instances per profile (a switch's split): launches of the ones short, then removals of
        the surplus, booting ones first (newest first)."""
        def change(st, now):
            started, stopped = 0, 0
            for p, n in want.items():
                while sum(1 for i in st["instances"] if i["profile"] == p) < n:
                    st["instances"].append(self._new(st["next_id"], now, p))
                    st["next_id"] += 1
                    started += 1
            for p, n in want.items():
                mine = sorted((i for i in st["instances"] if i["profile"] == p), key=lambda i: -i["launched_at"])
                drop = {i["id"] for i in mine[:max(0, len(mine) - n)]}
                stopped += len(drop)
                st["instances"] = [i for i in st["instances"] if i["id"] not in drop]
            return {"started": started, "stopped": stopped}
        if active:
            self.profile = active
        return self._mutate(change, now)

    def ready_by_profile(self, now: float | None = None) -> dict[str, int]:
        return self._ready_profiles(self._load(), time.time() if now is None else now)

    def _ready_profiles(self, st: dict[str, Any], t: float) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in st["instances"]:
            if self._is_ready(i, t):
                out[i["profile"]] = out.get(i["profile"], 0) + 1
        return out

    # ------------------------------------------------------------ signals
    def signals(self, now: float | None = None) -> dict[str, Any]:
        def read(st, now):
            minute = int(now // 60)
            last_rpm = self.rpm_at(minute - 1)
            ready = self._ready(st, now)
            mu = self._serving_rpm(st, now) / 60.0
            q = float(st["queue"])
            wait = (q / mu) if mu > 0 else (math.inf if q > 0 else 0.0)
            per_ready = last_rpm / ready if ready else 0.0
            lat = minute_latency(self.curves, self._ready_profiles(st, now), last_rpm, 0.0, wait, LATE_WAIT_S)
            insts = []
            for i in st["instances"]:
                is_ready = self._is_ready(i, now)
                if i.get("asleep"):
                    state = "asleep"
                elif not is_ready:
                    state = "waking" if "ready_at" in i else "booting"
                elif per_ready <= 0:
                    state = "ready_idle"
                elif per_ready >= self._capacity_of(i) or q > 0.5:
                    state = "saturated"
                else:
                    state = "ready_busy"
                insts.append({"id": i["id"], "url": None, "state": state, "profile": i["profile"],
                              "load_rpm": per_ready if is_ready else 0.0, "warmed": i["warmed"],
                              "launched_at": i["launched_at"], "waiting": None, "running": None})
            # the arrivals are the instances' readings, counted by the live scrape's code (signals.step);
            # reset's two rounds stay: a round counted already is skipped, so a look at the signals
            # outside the loop loses none
            return {"ts": now, "source": "simulated", "queue_depth": q, "observed_rpm": last_rpm,
                    "rounds": [*st.get("rounds", []), (now, Meter(**st.get("meter", {})).readings())],
                    "p99_s": lat.fleet_p99_s, "p99_by_profile": dict(lat.p99_by_profile),
                    "running": None, "instances": insts, "ready": ready, "provisioned": len(self._awake(st)),
                    "warmups": st["warmups"], "errors": {}}
        return self._mutate(read, now)
