"""The warm buffer (sized from the forecast's recent errors) and the asleep tier in the decision core."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from wu_helpers import T0, flat_forecast, fleet
from warmup.core import (
    CoreConfig,
    Instance,
    InstanceState,
    PolicyState,
    ScaleAction,
    ScalingConfig,
    TickInput,
    decide,
    decide_scale,
)
from warmup.core.buffer import buffer_tier, forecast_errors, plan_wakes, stage_buffer
from warmup.core.stats import quantile

CFG = ScalingConfig(capacity_rpm=300, min_replicas=1, max_replicas=40, cold_start_min=15, quantile=0.9,
                    target_utilisation=1.0, buffer_level=0.9, buffer_window_min=60, buffer_lead_min=5)


def asleep(n: int) -> tuple[Instance, ...]:
    return tuple(Instance(f"s{i}", InstanceState.ASLEEP) for i in range(n))


def test_forecast_errors_pair_up_and_skip_unknown_minutes() -> None:
    assert forecast_errors([100.0, float("nan"), 300.0], [90.0, 50.0, 350.0]) == (10.0, -50.0)
    with pytest.raises(ValueError, match="2 actual minutes but 1 forecasts"):
        forecast_errors([1.0, 2.0], [1.0])


def test_the_one_quantile_rule_is_numpys_default_and_keeps_inf() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100):
        xs = rng.normal(size=n).tolist()
        for q in (0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)), rel=1e-12, abs=1e-12)
    assert quantile([1.0, 2.0, float("inf"), float("inf")], 0.99) == float("inf")


def test_buffer_is_zero_when_the_forecast_has_been_high_enough() -> None:
    n, why = stage_buffer(CFG, [-50.0] * 60, 300.0)
    assert n == 0 and "has been high enough" in why


def test_buffer_covers_the_recent_shortfall() -> None:
    errors = [0.0] * 50 + [700.0] * 10          # P90 of the last 60 is 700 req/min: 3 replicas of 300
    n, why = stage_buffer(CFG, errors, 300.0)
    assert n == 3 and "warm buffer 3" in why and "P90" in why


def test_buffer_reads_only_its_window_and_needs_enough_errors() -> None:
    old_miss = [5000.0] * 100 + [0.0] * 60       # the big misses are older than the 60-minute window
    assert stage_buffer(CFG, old_miss, 300.0)[0] == 0
    n, why = stage_buffer(CFG, [900.0] * 5, 300.0)
    assert n == 0 and "too few" in why
    assert stage_buffer(replace(CFG, buffer_level=None), [900.0] * 60, 300.0) == (0, "")


def test_buffer_adds_to_the_forecast_need_and_says_so() -> None:
    errors = tuple([600.0] * 60)
    d, _ = decide_scale(CFG, T0, fleet(5), 1500.0, 0.0, flat_forecast(1500.0), PolicyState(), errors=errors)
    plain, _ = decide_scale(CFG, T0, fleet(5), 1500.0, 0.0, flat_forecast(1500.0), PolicyState())
    assert d.buffer == 2 and d.forecast_replicas == plain.forecast_replicas + 2
    assert d.desired == plain.desired + 2 and "warm buffer 2" in d.reason.text


def test_engine_passes_recent_errors_to_the_scaler() -> None:
    cfg = CoreConfig(scaling=CFG)
    inp = TickInput(now=T0, instances=fleet(5), observed_rpm=1500.0, forecast=flat_forecast(1500.0),
                    recent_errors=tuple([600.0] * 60))
    assert decide(cfg, inp, PolicyState()).scale.buffer == 2


def test_asleep_instances_are_not_provisioned_and_wake_before_a_launch() -> None:
    cfg = replace(CFG, buffer_level=None, wake_s=30.0)
    inst = fleet(5) + asleep(2)
    d, _ = decide_scale(cfg, T0, inst, 2400.0, 0.0, None, PolicyState())   # load needs 8
    assert d.current == 5 and d.asleep == 2 and d.desired == 8 and d.action is ScaleAction.UP
    assert d.wake == ("s0", "s1")
    assert "wakes 2 asleep (ready in 30 s) rather than launching (ready in 15 min)" in d.reason.text
    assert "launches 1 more" in d.reason.text


def test_a_wake_no_faster_than_a_launch_is_not_chosen() -> None:
    cfg = replace(CFG, buffer_level=None, wake_s=20 * 60.0)
    ids, why = plan_wakes(cfg, asleep(2), 3)
    assert ids == () and "no faster than a launch" in why


def test_no_wake_without_a_wake_time_or_a_scale_up() -> None:
    assert plan_wakes(replace(CFG, wake_s=None), asleep(2), 3) == ((), "")
    assert plan_wakes(replace(CFG, wake_s=30.0), asleep(2), 0) == ((), "")


def test_buffer_kept_asleep_is_held_apart_from_the_ready_need() -> None:
    cfg = replace(CFG, wake_s=30.0, buffer_asleep=True, sleep_cost_share=0.5)
    tier, why = buffer_tier(cfg)
    assert tier == "asleep" and "50% of a GPU-hour" in why and "30 s" in why
    errors = tuple([600.0] * 60)
    d, _ = decide_scale(cfg, T0, fleet(5), 1500.0, 0.0, flat_forecast(1500.0), PolicyState(), errors=errors)
    plain, _ = decide_scale(CFG, T0, fleet(5), 1500.0, 0.0, flat_forecast(1500.0), PolicyState())
    assert d.buffer == 2 and d.asleep_target == 2
    assert d.forecast_replicas == plain.forecast_replicas   # the ready need carries no buffer


def test_asleep_buffer_falls_back_to_ready_when_a_wake_is_slow() -> None:
    cfg = replace(CFG, wake_s=30 * 60.0, buffer_asleep=True)
    tier, why = buffer_tier(cfg)
    assert tier == "ready" and "no faster than a cold start" in why


@pytest.mark.parametrize("bad", [dict(buffer_level=0.0), dict(buffer_level=1.5), dict(buffer_window_min=0),
                                 dict(wake_s=-1.0), dict(sleep_cost_share=1.5),
                                 dict(buffer_asleep=True, wake_s=None)])
def test_config_validation(bad) -> None:
    with pytest.raises(ValueError):
        ScalingConfig(**bad)
