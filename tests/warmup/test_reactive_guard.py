"""Issue 27, never later than the autoscaler it replaces: with ``reactive_guard`` set to the HPA's
target utilisation, the decision core follows that HPA tick by tick (``warmup/core/hpa.py``, the
same functions the simulator's HPA baseline steps) and never holds fewer replicas than it would.

Property test on random load: the simulator's HPA baseline and the core (no forecast, scaling in
fast, so that alone it would drop below the HPA) run over the same arrivals from the same start; at
every minute the guarded core provisions at least the HPA's count, and without the guard it does
not (the guard is what holds it).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from warmup.core import CoreConfig, ScalingConfig
from warmup.sim.autoscalers import ReactiveHPA
from warmup.sim.fleet import FleetParams
from warmup.sim.loop import run_online
from warmup.sim.policies import CorePolicy

CAP, STEPS = 60.0, 6
P = FleetParams(capacity_rpm=CAP, cold_start_min=3.0)
T0 = datetime(2024, 5, 14, tzinfo=timezone.utc)


def _runs(load: np.ndarray, u: float, window: int, guard: bool):
    minutes = len(load)
    arrivals = np.repeat(load[:, None] / STEPS, STEPS, axis=1)
    hpa = run_online(ReactiveHPA(CAP, u, window, 1, 60), arrivals, float(load[0]), P, 2)
    sc = ScalingConfig(capacity_rpm=CAP, min_replicas=1, max_replicas=60, cold_start_min=3.0, stabilisation_s=0.0,
                       cooldown_down_s=0.0, reactive_utilisation=1.0,
                       reactive_guard=u if guard else None, reactive_guard_window_min=window)
    core = CorePolicy(CoreConfig(scaling=sc), [T0 + timedelta(minutes=m) for m in range(minutes)], (), None)
    return hpa, run_online(core, arrivals, float(load[0]), P, 2), core


loads = st.lists(st.tuples(st.integers(1, 20), st.floats(0.0, 1500.0)), min_size=3, max_size=12)


@settings(max_examples=40, deadline=None)
@given(segments=loads, u=st.sampled_from([0.5, 0.7, 0.86, 0.95]), window=st.sampled_from([1, 5, 15]))
def test_the_guarded_core_never_provisions_less_than_the_hpa_it_replaces(segments, u, window) -> None:
    load = np.concatenate([np.full(n, v) for n, v in segments])
    hpa, core, pol = _runs(load, u, window, guard=True)
    assert (core.provisioned >= hpa.provisioned).all(), np.flatnonzero(core.provisioned < hpa.provisioned)[:5]
    assert pol.state.hpa.replicas == int(hpa.provisioned[-1])     # it followed the HPA's own count exactly


def test_without_the_guard_the_same_core_drops_below_the_hpa_and_the_guard_says_why() -> None:
    load = np.concatenate([np.full(20, 900.0), np.full(20, 300.0), np.full(20, 1200.0)])
    hpa, alone, _ = _runs(load, 0.7, 5, guard=False)
    assert (alone.provisioned < hpa.provisioned).any()
    hpa, guarded, pol = _runs(load, 0.7, 5, guard=True)
    assert (guarded.provisioned >= hpa.provisioned).all()
    held = [text for _, kind, text in pol.events if kind == "scale" and "the HPA it replaces" in text]
    assert held and "target 70% of capacity, 5 min scale-down window" in held[0], pol.events[:5]
