"""Tiered warmup: tiers, duration, predictive ramp, instance choice, overload protection."""
from __future__ import annotations

from dataclasses import replace

import pytest

from wu_helpers import T0, flat_forecast, minutes
from warmup.core import (
    Instance,
    InstanceState,
    ReasonCode,
    WarmupAction,
    WarmupConfig,
    WarmupState,
    decide_warmup,
    select_targets,
    tier_for_depth,
    warmup_duration_s,
)

CFG = WarmupConfig()
CAP = 300.0


def inst(*spec: tuple[str, InstanceState, bool]) -> tuple[Instance, ...]:
    return tuple(Instance(i, s, warmed=w) for i, s, w in spec)


MIXED = inst(("busy", InstanceState.READY_BUSY, True), ("sat", InstanceState.SATURATED, True),
             ("idle", InstanceState.READY_IDLE, True), ("new", InstanceState.READY_IDLE, False),
             ("boot", InstanceState.BOOTING, False), ("wake", InstanceState.WAKING, False))


def run(depth=0.0, obs=300.0, p99=None, fc=None, state=None, instances=MIXED, cfg=CFG, now=T0):
    return decide_warmup(cfg, now, instances, obs, depth, p99, fc, state or WarmupState(), CAP)


@pytest.mark.parametrize("depth,tier", [(0, None), (5, None), (5.5, "low"), (10, "low"), (11, "medium"),
                                        (20, "medium"), (21, "high"), (500, "high")])
def test_tiers_by_queue_depth(depth, tier) -> None:
    t = tier_for_depth(CFG, depth)
    assert (t.name if t else None) == tier


@pytest.mark.parametrize("depth,dur", [(6, 3.0), (100, 50.0), (600, 300.0), (10_000, 300.0)])
def test_duration_is_min_300_and_half_a_second_per_queued(depth, dur) -> None:
    assert warmup_duration_s(CFG, depth) == dur


def test_queue_warmup_starts_with_tier_and_targets() -> None:
    d, st = run(depth=12, obs=300.0)
    assert d.action is WarmupAction.START and d.tier == "medium"
    assert d.reason.code is ReasonCode.WARMUP_QUEUE
    assert d.requests_per_instance == 6 and d.concurrency == 2  # medium 8 requests, capped by 20% of 300 rpm * 6 s
    assert d.duration_s == 6.0
    assert d.instances == ("new", "boot", "wake", "idle")     # never busy or saturated
    assert st.started == 1 and st.active_until == T0 + minutes(0.1)


def test_targets_order_and_exclusions() -> None:
    assert select_targets(CFG, MIXED, under_pressure=False) == ("new", "boot", "wake", "idle")
    # Under pressure the warm idle instance is left for real traffic.
    assert select_targets(CFG, MIXED, under_pressure=True) == ("new", "boot", "wake")
    assert select_targets(replace(CFG, max_instances=2), MIXED, under_pressure=False) == ("new", "boot")


def test_overload_protection_caps_rate_per_instance() -> None:
    # high tier asks 16 requests; 300 s at 20% of 300 rpm allows 300, so 16 stay; concurrency capped at 4.
    d, _ = run(depth=1000)
    assert d.tier == "high" and d.requests_per_instance == 16 and d.concurrency == 4
    cfg = replace(CFG, max_share=0.01)          # 1% of 300 rpm over 300 s = 15 requests
    d, _ = run(depth=1000, cfg=cfg)
    assert d.requests_per_instance == 15
    d, _ = run(depth=6, cfg=cfg)                # 3 s at 3 rpm: not even one request
    assert d.action is WarmupAction.NONE and d.requests_per_instance == 0


def test_predictive_ramp_starts_fifteen_minutes_before_growth() -> None:
    def ramp_at(minutes_away: int):
        path = [1000.0] * minutes_away + [1500.0] * (30 - minutes_away)
        return run(obs=1000.0, fc=flat_forecast(path))[0]

    assert ramp_at(16).action is WarmupAction.NONE
    fr = [ramp_at(m) for m in (15, 10, 5, 1, 0)]
    assert all(d.action is WarmupAction.START and d.tier == "ramp" for d in fr)
    assert all(d.reason.code is ReasonCode.WARMUP_PREDICTED_GROWTH for d in fr)
    reqs = [d.requests_per_instance for d in fr]
    assert reqs == sorted(reqs) and reqs[0] < reqs[-1] == 16   # gradual up to the high tier


def test_ramp_continues_without_counting_new_warmups() -> None:
    path = [1000.0] * 10 + [1500.0] * 20
    d1, st = run(obs=1000.0, fc=flat_forecast(path))
    d2, st2 = run(obs=1000.0, fc=flat_forecast(path[1:] + [1500.0], origin=T0 + minutes(1)), state=st,
                  now=T0 + minutes(1))
    assert d1.action is WarmupAction.START and d2.action is WarmupAction.CONTINUE
    assert st2.started == 1


def test_no_growth_no_queue_is_idle_with_reason() -> None:
    d, _ = run(depth=2, obs=1000.0, fc=flat_forecast(1000.0))
    assert d.action is WarmupAction.NONE and d.reason.code is ReasonCode.WARMUP_IDLE


def test_stops_when_p99_rises_and_learns_baseline_only_when_idle() -> None:
    _, st = run(depth=0, p99=2.0)
    assert st.p99_baseline_s == 2.0
    d, st = run(depth=30, p99=2.0, state=st)
    assert d.action is WarmupAction.START
    d, st2 = run(depth=30, p99=2.6, state=st, now=T0 + minutes(0.1))  # +30% while active (15 s warmup)
    assert d.action is WarmupAction.STOP and d.reason.code is ReasonCode.WARMUP_STOP_P99
    assert st2.active_until is None
    assert st2.p99_baseline_s == 2.0  # not learnt from the active-warmup P99
    d, _ = run(depth=30, p99=2.6, state=st2, now=T0 + minutes(1))
    assert d.action is WarmupAction.NONE and d.reason.code is ReasonCode.WARMUP_STOP_P99


def test_stops_when_real_traffic_needs_the_capacity() -> None:
    busy_only = inst(("a", InstanceState.READY_BUSY, True), ("b", InstanceState.READY_IDLE, True))
    d, st = run(depth=30, obs=100.0, instances=busy_only)
    assert d.action is WarmupAction.START and d.instances == ("b",)
    d, _ = run(depth=30, obs=590.0, instances=busy_only, state=st, now=T0 + minutes(0.2))
    assert d.action is WarmupAction.STOP and d.reason.code is ReasonCode.WARMUP_STOP_TRAFFIC


def test_never_warms_saturated_or_busy() -> None:
    only = inst(("a", InstanceState.READY_BUSY, True), ("b", InstanceState.SATURATED, False))
    d, _ = run(depth=50, obs=100.0, instances=only)
    assert d.action is WarmupAction.NONE and d.reason.code is ReasonCode.WARMUP_NO_ELIGIBLE


def test_finished_warmup_reports_done() -> None:
    _, st = run(depth=12)
    d, st2 = run(depth=0, state=st, now=T0 + minutes(5))
    assert d.action is WarmupAction.NONE and d.reason.code is ReasonCode.WARMUP_DONE and st2.tier == ""


def test_disabled() -> None:
    d, _ = run(depth=100, cfg=replace(CFG, enabled=False))
    assert d.action is WarmupAction.NONE and "disabled" in d.reason.text
