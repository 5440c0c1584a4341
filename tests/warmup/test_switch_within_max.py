"""Issue 31 finding 3: a profile switch provisioned 12 instances against a max of 9.  Every count the
core asks for, in every switch phase, is within ``max_replicas``: a property test drives random fleets
through whole switches (pre-warm, canary, move, settle, and rollbacks when the P99 rises)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, time, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from warmup.core import (CoreConfig, ForecastInput, Instance, InstanceState, ScalingConfig, ScheduleWindow,
                         SwitchConfig, TickInput, decide)
from warmup.core.state import SwitchPhase, SwitchState
from warmup.core.switch_capacity import split

T0 = datetime(2024, 5, 14, 21, 0, tzinfo=timezone.utc)


def _cfg(max_replicas: int, day: float, night: float) -> CoreConfig:
    sw = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", day), ("night", night)),
                      windows=(ScheduleWindow("night", time(22, 0), time(6, 0)),), prewarm_min=10.0,
                      hold_min=0.0, settle_min=3.0, max_prewarm_wait_min=20.0, max_replicas=max_replicas)
    return CoreConfig(scaling=ScalingConfig(capacity_rpm=day, min_replicas=1, max_replicas=max_replicas,
                                            cold_start_min=3.0), switch=sw)


@settings(max_examples=60, deadline=None)
@given(max_replicas=st.integers(1, 12), day=st.sampled_from([50.0, 100.0, 300.0]),
       night=st.sampled_from([25.0, 60.0, 200.0]), load=st.floats(10.0, 3000.0),
       p99=st.lists(st.sampled_from([1.0, 1.0, 1.0, 3.0]), min_size=90, max_size=90))
def test_every_count_in_every_switch_phase_is_within_max_replicas(max_replicas, day, night, load, p99):
    cfg = _cfg(max_replicas, day, night)
    state, pools, seen = None, {"day": min(max_replicas, 3), "night": 0}, set()
    for minute in range(90):
        now = T0 + timedelta(minutes=minute)
        insts = tuple(Instance(f"{p}{i}", InstanceState.READY_BUSY, profile=p) for p, n in pools.items()
                      for i in range(n))
        fc = ForecastInput(now, (0.5, 0.9), ((load,) * 30, (load * 1.2,) * 30))
        out = decide(cfg, TickInput(now, insts, load, forecast=fc, p99_latency_s=p99[minute]), state)
        state = out.state
        seen.add(state.switch.phase)
        want = dict(out.switch.replicas) if out.switch.replicas else {state.switch.active_profile or "day":
                                                                        out.scale.desired}
        total = sum(want.get(p, pools[p]) for p in pools)
        assert total <= max_replicas, (minute, state.switch.phase, want, pools)
        pools = {p: want.get(p, n if out.switch.replicas else 0) for p, n in pools.items()}   # ready at once
    assert SwitchPhase.PREWARM in seen


def test_split_gives_the_serving_side_its_count_and_the_other_the_headroom():
    sw = _cfg(9, 100.0, 50.0).switch
    prewarm = SwitchState(phase=SwitchPhase.PREWARM, active_profile="day", target_profile="night")
    # 900 req/min: day needs 9, night 18; the bound is 9 in all
    assert split(sw, prewarm, 900.0, {"day": 9}) == (("day", 9), ("night", 0))
    move = replace(prewarm, phase=SwitchPhase.MOVE)
    assert split(sw, move, 900.0, {"day": 6, "night": 6}) == (("day", 6), ("night", 3))   # 6 night cover 300
    unbounded = replace(sw, max_replicas=None)
    assert split(unbounded, prewarm, 900.0, {"day": 9}) == (("day", 9), ("night", 1))    # the canary: 1 of 10
    assert split(unbounded, move, 900.0, {"day": 6, "night": 6}) == (("day", 6), ("night", 18))
