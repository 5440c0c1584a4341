"""Which requests late during a simulated profile switch the switch caused (``warmup.sim.switches``).

The rule: a switch minute still draining a backlog carried into the switch is the planner's
shortfall; once that backlog has drained, lateness inside the switch is the switch's.  The real
core never lowers ready capacity inside a switch, so it cannot produce the second case: a
SCRIPTED policy stands in for it here and names replicas per profile minute by minute.  Everything
else is the simulator's own: the pools (cuts at once, launches ready one cold start later), the
FIFO queue served at each profile's capacity, the carried-backlog rule in ``run_online`` and the
report's ``switch_columns``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from warmup.core import CoreConfig, SwitchConfig
from warmup.sim.fleet import FleetParams, FleetRun, Observation, switch_columns
from warmup.sim.fleet import Pool
from warmup.sim.loop import run_online

P = FleetParams(capacity_rpm=60.0, cold_start_min=3, wait_threshold_s=5.0)   # 1 request/s per instance
DEMAND_RPM, STEPS = 120.0, 6                                                  # 2 requests/s, 10 s steps
Script = Callable[[int], tuple[dict[str, int], bool]]


class ScriptedSwitch:
    """Replicas per profile and whether a switch runs, from ``script(minute)`` (not the core)."""

    name = "scripted"

    def __init__(self, script: Script) -> None:
        self.script = script
        self.cfg = CoreConfig(switch=SwitchConfig(enabled=True, default_profile="day",
                                                  profile_capacity=(("day", 60.0), ("night", 60.0))))
        self.active = "day"

    def capacity_of(self, profile: str) -> float:
        return self.cfg.switch.capacity_of(profile, P.capacity_rpm)

    def decide_profiles(self, obs: Observation, pools: dict[str, Pool]) -> tuple[dict[str, int], int, bool]:
        want, switching = self.script(obs.t)
        return want, sum(want.values()), switching


def backlog_then_switch(drop: bool) -> Script:
    """Minutes 0-4: one day replica for 2 req/s, so a backlog builds (the planner's); two night
    replicas launched at minute 2 are ready at 5, when the switch starts (it runs to minute 19) and
    the backlog drains by minute 10.  With ``drop`` the script retires night at minute 12 before
    the two day replicas it launches then are ready (at 15): ready capacity falls inside the switch."""
    def script(t: int) -> tuple[dict[str, int], bool]:
        if drop and t >= 12:
            return {"day": 3, "night": 0}, t < 20
        return {"day": 1, "night": 2 if t >= 2 else 0}, 5 <= t < 20
    return script


def run(script: Script, minutes: int = 25) -> FleetRun:
    arrivals = np.full((minutes, STEPS), DEMAND_RPM / STEPS)
    return run_online(ScriptedSwitch(script), arrivals, DEMAND_RPM, P, initial_ready=1)


def test_a_backlog_carried_into_a_switch_is_not_counted_as_caused_by_it() -> None:
    r = run(backlog_then_switch(drop=False))
    switch = np.arange(25)[r.switching]
    assert (switch.min(), switch.max()) == (5, 19)
    assert r.queue[4] == pytest.approx(300.0)              # 5 min x 60 req/min short before the switch
    assert r.late[:5].sum() > 0 and r.late[5:10].sum() > 0   # late before it and while it drains inside it
    assert r.switch_carried.tolist() == [5 <= t < 10 for t in range(25)]
    assert r.late[10:].sum() == 0.0                         # drained: nothing late in the rest of the switch
    cols = switch_columns(r, P.gpus_per_replica)
    assert cols["late_during_switches"] > 0
    assert cols["late_during_switches"] == pytest.approx(round(r.late[5:10].sum(), 1))
    assert cols["late_caused_by_switches"] == 0.0


def test_lateness_from_ready_capacity_dropping_inside_a_switch_is_counted() -> None:
    r = run(backlog_then_switch(drop=True))
    assert r.ready[11] == 3 and r.ready[12:15].tolist() == [1, 1, 1] and r.ready[15] == 3   # the dip
    assert r.queue[11] == 0.0 and r.queue[14] == pytest.approx(180.0)    # a new backlog, built inside
    assert r.switch_carried.tolist() == [5 <= t < 10 for t in range(25)]  # the carried one is not it
    own = r.late[10:20].sum()
    assert own > 0 and r.late[12:18].sum() == pytest.approx(own)
    cols = switch_columns(r, P.gpus_per_replica)
    assert cols["late_caused_by_switches"] == pytest.approx(round(own, 1))
    assert cols["late_during_switches"] == pytest.approx(round(r.late[5:20].sum(), 1))
    assert cols["late_during_switches"] - cols["late_caused_by_switches"] == pytest.approx(
        r.late[5:10].sum(), abs=0.1)                         # the carried backlog's lateness stays out
