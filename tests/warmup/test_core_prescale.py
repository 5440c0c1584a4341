"""Pre-scaling: the recommendation, its reason, and every guardrail stage."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from wu_helpers import T0, flat_forecast, fleet, minutes
from warmup.core import (
    ForecastInput,
    Instance,
    InstanceState,
    PolicyState,
    ReasonCode,
    ScaleAction,
    ScalingConfig,
    decide_scale,
    forecast_need,
    replicas_for,
    scale_in_order,
)

CFG = ScalingConfig(capacity_rpm=300, min_replicas=1, max_replicas=40, cold_start_min=15, quantile=0.9,
                    target_utilisation=1.0, stabilisation_s=300, cooldown_down_s=300)


def run(cfg=CFG, inst=None, obs=1500.0, q=0.0, fc=None, state=None, now=T0):
    return decide_scale(cfg, now, inst if inst is not None else fleet(5), obs, q, fc, state or PolicyState())


def test_replicas_for_rounds_up_and_handles_zero() -> None:
    assert replicas_for(0, 300, 1.0) == 0
    assert replicas_for(300, 300, 1.0) == 1
    assert replicas_for(301, 300, 1.0) == 2
    assert replicas_for(600, 300, 0.5) == 4
    assert replicas_for(float("nan"), 300, 1.0) == 0


def test_forecast_prescales_ahead_of_growth() -> None:
    # Flat 1,500 now; P90 reaches 3,300 in 10 minutes (inside the 15-minute lead).
    path = [1500.0] * 10 + [3000.0] * 20
    d, st = run(fc=flat_forecast(path))
    assert d.forecast_replicas == 11  # 3000 * 1.1 / 300
    assert d.desired == 11 and d.action is ScaleAction.UP
    assert d.reason.code is ReasonCode.FORECAST_PRESCALE
    assert "P90" in d.reason.text and st.last_scale_up == T0


def test_growth_beyond_the_lead_window_is_not_bought_yet() -> None:
    path = [1500.0] * 20 + [3000.0] * 10   # growth 20 min away, lead 15
    d, _ = run(fc=flat_forecast(path))
    assert d.desired == 6  # 1650 / 300 -> 6
    cfg = replace(CFG, margin_min=5.0)     # lead 20 sees it
    d2, _ = run(cfg=cfg, fc=flat_forecast(path))
    assert d2.desired == 11


def test_lead_window_is_inclusive_of_cold_start_minute() -> None:
    # The minute now+15 is when a launch made now becomes ready: it must be inside.
    path = [1500.0] * 15 + [3000.0] + [1500.0] * 14
    d, _ = run(fc=flat_forecast(path))
    assert d.forecast_replicas == 11
    path = [1500.0] * 16 + [3000.0] + [1500.0] * 13
    d, _ = run(fc=flat_forecast(path))
    assert d.forecast_replicas == 6


def test_reactive_floor_never_below_current_need() -> None:
    d, _ = run(obs=2700.0, fc=flat_forecast(900.0))
    assert d.reactive_replicas == 9 and d.desired == 9
    assert d.reason.code is ReasonCode.REACTIVE_LOAD


def test_queue_backlog_adds_to_the_load() -> None:
    # By default the backlog is drained over the lead (15 min): 9,000 queued -> +600 rpm.
    d, _ = run(obs=1500.0, q=9000.0, fc=flat_forecast(100.0))
    assert d.reactive_replicas == 7
    assert d.reason.code is ReasonCode.QUEUE_BACKLOG
    d, _ = run(cfg=replace(CFG, queue_drain_s=60.0), obs=1500.0, q=600.0, fc=flat_forecast(100.0))
    assert d.reactive_replicas == 7


def test_no_forecast_falls_back_to_reactive_with_reason() -> None:
    d, _ = run(obs=2000.0, fc=None)
    assert d.forecast_replicas is None and d.desired == 7
    assert d.reason.code is ReasonCode.NO_FORECAST


def test_stale_forecast_is_ignored() -> None:
    fc = flat_forecast(6000.0, origin=T0 - minutes(20))
    d, _ = run(obs=1500.0, fc=fc)
    assert d.forecast_replicas is None and d.desired == 5
    assert d.reason.code is ReasonCode.STALE_FORECAST


def test_slightly_old_forecast_is_read_from_the_right_offset() -> None:
    path = [3000.0] * 3 + [1500.0] * 27   # the high part lies in the past by now
    fc = flat_forecast(path, origin=T0 - minutes(3))
    need, why, peak, at = forecast_need(CFG, fc, T0, 300.0)
    assert why is None and need == 6 and math.isclose(peak, 1650.0)


def test_broken_forecast_is_ignored() -> None:
    fc = ForecastInput(T0, (0.5,), ((float("nan"),) * 30,))
    d, _ = run(obs=1500.0, fc=fc)
    assert d.forecast_replicas is None and d.reason.code is ReasonCode.NO_FORECAST
    assert d.desired == 5


def test_unknown_load_never_scales_in() -> None:
    d, _ = run(obs=float("nan"), fc=None, inst=fleet(8))
    assert d.desired == 8 and d.action is ScaleAction.HOLD


def test_forecast_blocks_scale_in() -> None:
    # Load fell to 600 but the forecast needs 8 within the lead window.
    path = [600.0] * 10 + [2400.0] * 20
    d, _ = run(obs=600.0, inst=fleet(8), fc=flat_forecast(path, spread=0.0))
    assert d.desired == 8 and d.action is ScaleAction.HOLD
    assert d.reason.code is ReasonCode.FORECAST_BLOCKS_SCALE_IN


def test_scale_in_when_forecast_allows_after_stabilisation() -> None:
    fc = flat_forecast(600.0, spread=0.0)
    old = PolicyState(history=((T0 - minutes(10), 8),))  # outside the 5-min window
    d, st = run(obs=600.0, inst=fleet(8), fc=fc, state=old)
    assert d.desired == 2 and d.action is ScaleAction.DOWN
    assert st.last_scale_down == T0
    assert len(d.remove) == 6


def test_stabilisation_holds_scale_in_at_recent_high() -> None:
    fc = flat_forecast(600.0, spread=0.0)
    st = PolicyState(history=((T0 - minutes(3), 7), (T0 - minutes(1), 5)))
    d, _ = run(obs=600.0, inst=fleet(8), fc=fc, state=st)
    assert d.desired == 7
    assert d.reason.code is ReasonCode.STABILISATION


def test_cooldown_blocks_scale_in_but_not_scale_up() -> None:
    fc = flat_forecast(600.0, spread=0.0)
    st = PolicyState(last_scale_up=T0 - minutes(2))
    d, _ = run(obs=600.0, inst=fleet(8), fc=fc, state=st)
    assert d.desired == 8 and d.reason.code is ReasonCode.COOLDOWN_DOWN
    d, _ = run(obs=3000.0, inst=fleet(8), fc=fc, state=st)
    assert d.desired == 10 and d.action is ScaleAction.UP


def test_cooldown_up_when_configured() -> None:
    cfg = replace(CFG, cooldown_up_s=120)
    st = PolicyState(last_scale_down=T0 - minutes(1))
    d, _ = run(cfg=cfg, obs=3000.0, inst=fleet(8), fc=None, state=st)
    assert d.desired == 8 and d.reason.code is ReasonCode.COOLDOWN_UP


def test_max_step_limits_both_ways() -> None:
    cfg = replace(CFG, max_step_up=2, max_step_down=1)
    d, _ = run(cfg=cfg, obs=6000.0, inst=fleet(5), fc=None)
    assert d.desired == 7 and d.reason.code is ReasonCode.MAX_STEP
    d, _ = run(cfg=cfg, obs=300.0, inst=fleet(5), fc=flat_forecast(300.0, spread=0.0))
    assert d.desired == 4 and d.reason.code is ReasonCode.MAX_STEP


def test_bounds_and_gpu_budget() -> None:
    cfg = replace(CFG, max_replicas=10)
    d, _ = run(cfg=cfg, obs=9000.0, fc=None)
    assert d.desired == 10 and d.reason.code is ReasonCode.MAX_REPLICAS
    cfg = replace(CFG, min_replicas=3)
    d, _ = run(cfg=cfg, obs=0.0, inst=fleet(3), fc=flat_forecast(0.0))
    assert d.desired == 3 and d.reason.code is ReasonCode.MIN_REPLICAS
    cfg = replace(CFG, gpus_per_replica=2, gpu_budget=14)
    d, _ = run(cfg=cfg, obs=9000.0, fc=None)
    assert d.desired == 7 and d.reason.code is ReasonCode.GPU_BUDGET
    assert [s.stage for s in d.steps] == ["stabilisation", "max_step", "cooldown", "reactive_guard", "bounds",
                                         "gpu_budget"]


def test_doing_nothing_has_a_reason() -> None:
    d, _ = run(obs=1500.0, inst=fleet(5), fc=flat_forecast(1500.0, spread=0.0))
    assert d.action is ScaleAction.HOLD and d.desired == 5
    assert d.reason.code is ReasonCode.NO_CHANGE and d.reason.text


def test_state_history_is_pruned_to_the_window() -> None:
    st = PolicyState(history=tuple((T0 - minutes(m), 3) for m in (30, 20, 10, 4, 1)))
    _, st2 = run(state=st)
    assert [t for t, _ in st2.history] == [T0 - minutes(4), T0 - minutes(1), T0]


def test_naive_and_aware_times_mix() -> None:
    naive_now = T0.replace(tzinfo=None)
    st = PolicyState(last_scale_up=naive_now - minutes(1), history=((naive_now - minutes(1), 9),))
    d, _ = decide_scale(CFG, naive_now, fleet(8), 300.0, 0.0, flat_forecast(300.0, origin=naive_now), st)
    assert d.desired == 8  # cooldown still holds across naive/aware


def test_scale_in_order_prefers_booting_then_idle() -> None:
    inst = (Instance("busy", InstanceState.READY_BUSY, load_rpm=200), Instance("sat", InstanceState.SATURATED),
            Instance("idle", InstanceState.READY_IDLE), Instance("boot-old", InstanceState.BOOTING,
                                                                 launched_at=T0 - minutes(10)),
            Instance("boot-new", InstanceState.BOOTING, launched_at=T0 - minutes(1)),
            Instance("wake", InstanceState.WAKING))
    assert scale_in_order(inst) == ("boot-new", "boot-old", "wake", "idle", "busy", "sat")


@pytest.mark.parametrize("bad", [dict(quantile=1.0), dict(min_replicas=5, max_replicas=2),
                                 dict(capacity_rpm=0), dict(max_step_up=0), dict(target_utilisation=0)])
def test_config_validation(bad) -> None:
    with pytest.raises(ValueError):
        ScalingConfig(**bad)
