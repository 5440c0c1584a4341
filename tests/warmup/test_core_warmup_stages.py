"""Each stage of the warmup decision on its own (``warmup.core.warmup``)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from wu_helpers import T0, flat_forecast, minutes
from warmup.core import Instance, InstanceState, Reason, ReasonCode, WarmupAction, WarmupConfig, WarmupState
from warmup.core.warmup import (
    RAMP,
    WarmupAsk,
    WarmupTick,
    fleet_utilisation,
    learn_p99_baseline,
    no_share_left,
    no_targets,
    nothing_asked,
    queue_ask,
    ramp_ask,
    start_or_continue,
    stop_on_p99,
    within_share,
)

CFG = WarmupConfig()
ASK = WarmupAsk("low", 4, 1, 30.0, Reason(ReasonCode.WARMUP_QUEUE, "queue above 5"))


def tick(*, ask=ASK, active=False, state=None, p99=None, targets=("a",), pressure=False, cfg=CFG,
         cap=300.0) -> WarmupTick:
    state = state or WarmupState(active_until=T0 + minutes(2) if active else None, tier="low" if active else "")
    return WarmupTick(cfg, T0, p99, cap, state, active, 0.0, 0.95 if pressure else 0.3, pressure, ask, targets)


def test_p99_baseline_is_an_ewma_learnt_only_while_no_warmup_runs() -> None:
    st, active = learn_p99_baseline(CFG, WarmupState(), T0, 2.0)
    assert (st.p99_baseline_s, active) == (2.0, False)
    st, _ = learn_p99_baseline(CFG, st, T0, 1.0)
    assert st.p99_baseline_s == pytest.approx(0.9 * 2.0 + 0.1 * 1.0)
    running = replace(st, active_until=T0 + minutes(1))
    st2, active = learn_p99_baseline(CFG, running, T0, 50.0)
    assert active and st2.p99_baseline_s == st.p99_baseline_s
    for bad in (None, math.nan, 0.0):
        assert learn_p99_baseline(CFG, st, T0, bad)[0].p99_baseline_s == st.p99_baseline_s


def test_fleet_utilisation() -> None:
    ready = (Instance("r", InstanceState.READY_BUSY), Instance("b", InstanceState.BOOTING))
    assert fleet_utilisation(ready, 150.0, 300.0) == (150.0, 0.5)
    assert fleet_utilisation(ready, math.nan, 300.0) == (0.0, 0.0)
    assert fleet_utilisation(ready[1:], 10.0, 300.0) == (10.0, math.inf)
    assert fleet_utilisation(ready[1:], 0.0, 300.0) == (0.0, 0.0)


def test_queue_ask_takes_the_highest_tier_crossed() -> None:
    assert queue_ask(CFG, 5.0) is None
    ask = queue_ask(CFG, 12.0)
    assert (ask.tier, ask.requests, ask.concurrency, ask.duration_s) == ("medium", 8, 2, 6.0)
    assert ask.reason.code is ReasonCode.WARMUP_QUEUE


def test_ramp_ask_grows_as_the_forecast_growth_nears() -> None:
    assert ramp_ask(CFG, flat_forecast(300.0), T0, 300.0) is None
    assert ramp_ask(CFG, None, T0, 300.0) is None
    far = ramp_ask(CFG, flat_forecast([300.0] * 12 + [600.0] * 20), T0, 300.0)
    near = ramp_ask(CFG, flat_forecast([300.0] * 2 + [600.0] * 30), T0, 300.0)
    now = ramp_ask(CFG, flat_forecast(600.0), T0, 300.0)
    assert far.tier == near.tier == RAMP and far.reason.code is ReasonCode.WARMUP_PREDICTED_GROWTH
    assert far.requests < near.requests < now.requests == CFG.tiers[-1].requests
    assert now.concurrency == CFG.tiers[-1].concurrency and now.duration_s == 60.0


def test_stop_on_p99() -> None:
    base = WarmupState(p99_baseline_s=1.0)
    assert stop_on_p99(tick(state=base, p99=1.19)) is None
    assert stop_on_p99(tick(state=base, p99=5.0, ask=None)) is None       # nothing running, nothing asked
    d, st = stop_on_p99(tick(state=base, p99=1.5))
    assert (d.action, d.reason.code, st) == (WarmupAction.NONE, ReasonCode.WARMUP_STOP_P99, base)
    running = replace(base, active_until=T0 + minutes(1), tier="high")
    d, st = stop_on_p99(tick(state=running, active=True, p99=1.5, ask=None))
    assert (d.action, d.tier, st.active_until, st.tier) == (WarmupAction.STOP, "high", None, "")


def test_nothing_asked_continues_clears_or_idles() -> None:
    assert nothing_asked(tick()) is None
    d, st = nothing_asked(tick(ask=None, active=True))
    assert (d.action, d.duration_s, st.tier) == (WarmupAction.CONTINUE, 120.0, "low")
    d, st = nothing_asked(tick(ask=None, state=WarmupState(tier="low", active_until=T0)))
    assert (d.reason.code, st.tier, st.active_until) == (ReasonCode.WARMUP_DONE, "", None)
    d, st = nothing_asked(tick(ask=None))
    assert (d.action, d.reason.code) == (WarmupAction.NONE, ReasonCode.WARMUP_IDLE)


def test_no_targets() -> None:
    assert no_targets(tick()) is None
    assert no_targets(tick(targets=()))[0].reason.code is ReasonCode.WARMUP_NO_ELIGIBLE
    d, _ = no_targets(tick(targets=(), pressure=True))
    assert (d.action, d.reason.code) == (WarmupAction.NONE, ReasonCode.WARMUP_STOP_TRAFFIC)
    d, st = no_targets(tick(targets=(), pressure=True, active=True))
    assert (d.action, st.active_until) == (WarmupAction.STOP, None)


def test_within_share_caps_requests_and_concurrency() -> None:
    # 20% of 300 req/min over 30 s = 30 requests allowed: the ask's 4 pass
    assert within_share(tick(), ASK) == (4, 1)
    # 20% of 6 req/min over 30 s = 0.6: none allowed
    assert within_share(tick(cap=6.0), ASK) == (0, 0)
    big = replace(ASK, requests=16, concurrency=9)
    assert within_share(tick(cap=12.0), big) == (1, 1)
    assert within_share(tick(), big) == (16, CFG.max_concurrency)


def test_no_share_left() -> None:
    assert no_share_left(tick()) is None
    d, _ = no_share_left(tick(cap=6.0))
    assert (d.action, d.reason.code) == (WarmupAction.NONE, ReasonCode.WARMUP_NO_ELIGIBLE)


def test_start_or_continue() -> None:
    d, st = start_or_continue(tick(targets=("a", "b")))
    assert (d.action, d.instances, d.requests_per_instance, st.started, st.tier) == (
        WarmupAction.START, ("a", "b"), 4, 1, "low")
    assert st.active_until == T0 + minutes(0.5)
    d, st = start_or_continue(tick(active=True))          # a running warmup is extended, never shortened
    assert (d.action, st.started, st.active_until) == (WarmupAction.CONTINUE, 0, T0 + minutes(2))
    ramp = replace(ASK, tier=RAMP)
    d, st = start_or_continue(tick(ask=ramp, state=WarmupState(tier=RAMP, started=3)))
    assert (d.action, st.started) == (WarmupAction.CONTINUE, 3)
