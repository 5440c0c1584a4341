"""The one simulation loop (issue 42): profiles, the asleep tier, warmup charges and latency
feedback in the same run.  Before, ``run_profiles`` (profiles, latency) kept no asleep tier and
``run_online`` (asleep tier, warmups) knew no profiles; a policy with both lost one of them.

A SCRIPTED policy names replicas per profile, keeps instances asleep and sends a warmup; everything
else is the simulator's own (pools, asleep tier, FIFO queue, warmup charges, the latency curves)."""
from __future__ import annotations

import numpy as np
import pytest

from warmup.core import CoreConfig, SwitchConfig
from warmup.sim.fleet import FleetParams, Observation, Pool, summarise
from warmup.sim.latency import default_curve
from warmup.sim.loop import run_online
from warmup.sim.warmups import WarmupCharges

P = FleetParams(capacity_rpm=60.0, cold_start_min=3, wake_s=20.0, sleep_cost_share=0.5)
STEPS = 6


class NightWithSleep:
    """Night active: one replica until minute 4, then three; two kept asleep; a warmup of 30
    requests to the night replica ready at minute 2."""

    name = "scripted"

    def __init__(self) -> None:
        self.cfg = CoreConfig(switch=SwitchConfig(enabled=True, default_profile="day",
                                                  profile_capacity=(("day", 60.0), ("night", 30.0))))
        self.active = "night"
        self.charges = WarmupCharges()
        self.seen_p99: list[float | None] = []

    def capacity_of(self, profile: str) -> float:
        return self.cfg.switch.capacity_of(profile, P.capacity_rpm)

    def decide_profiles(self, obs: Observation, pools: dict[str, Pool]) -> tuple[dict[str, int], int, bool]:
        self.seen_p99.append(obs.p99_s)
        if obs.t == 2:
            self.charges.start(2, 30.0, ["night-r0"], 60.0)
        n = 1 if obs.t < 4 else 3
        return {"day": 0, "night": n}, n, False

    def asleep_target(self) -> int:
        return 2

    def warmup_load(self, t: int, booting) -> float:
        return self.charges.take(t, booting)


def test_profiles_asleep_tier_warmups_and_latency_in_one_run() -> None:
    arrivals = np.full((8, STEPS), 20.0 / STEPS)       # 20 req/min
    curves = {"day": default_curve(60.0, 1000.0), "night": default_curve(30.0, 1000.0)}
    pol = NightWithSleep()
    r = run_online(pol, arrivals, 20.0, P, initial_ready=1, curves=curves)
    # the asleep tier: two launched to sleep at minute 0 (asleep from 3), both woken at minute 4
    assert r.wakes == 2 and r.ready[4] == 3 and r.standby[0] == 2.0
    # the night replica serves 30 req/min; the warmup's 30 requests take all of minute 2's capacity
    assert r.warmup_requests[2] == pytest.approx(30.0) and r.queue[2] == pytest.approx(20.0)
    # each profile's curve gave a P99 the next minute's policy read; minute 2 served nothing (its
    # wait is unbounded), so minute 3 read none
    read = [p is not None for p in pol.seen_p99]
    assert read == [False, True, True, False, True, True, True, True], pol.seen_p99
    assert r.ttft_p99_ms is not None and np.isinf(r.ttft_p99_ms[2]) and r.ttft_p99_ms[1] < 1000.0
    row = summarise(r, arrivals.sum(axis=1), P)
    assert row["wakes"] == 2 and row["warmup_requests"] == pytest.approx(30.0)
