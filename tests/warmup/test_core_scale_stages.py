"""Each stage of the pre-scaling decision on its own (``warmup.core.prescale``)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from wu_helpers import T0, flat_forecast, minutes
from warmup.core import PolicyState, Reason, ReasonCode, ScaleAction, ScalingConfig
from warmup.core.guardrails import (
    GUARDRAILS,
    GuardrailContext,
    apply_guardrails,
    stage_bounds,
    stage_cooldown,
    stage_gpu_budget,
    stage_max_step,
    stage_stabilisation,
)
from warmup.core.prescale import (
    ScaleNeeds,
    hold_reason,
    need_reason,
    next_scale_state,
    scale_action,
    scale_needs,
)

CFG = ScalingConfig(capacity_rpm=300, min_replicas=1, max_replicas=10, cold_start_min=15, stabilisation_s=300,
                    cooldown_down_s=300)
NO_FC = Reason(ReasonCode.NO_FORECAST, "no forecast available")


def needs(reactive=3, forecast=None, *, queue=False, known=True, why=None) -> ScaleNeeds:
    return ScaleNeeds(reactive, reactive * 300.0, queue, known, forecast, why, 1200.0, 7)


def test_scale_needs_takes_the_larger_and_never_scales_in_on_unknown_load() -> None:
    n = scale_needs(CFG, T0, 5, 600.0, 0.0, flat_forecast(1500.0), 300.0)
    assert (n.reactive, n.forecast, n.raw, n.no_forecast) == (2, 6, 6, None)   # P90 = 1650 -> 6
    n = scale_needs(CFG, T0, 5, math.nan, 0.0, None, 300.0)
    assert (n.reactive, n.forecast, n.raw, n.load_known) == (5, None, 5, False)
    assert n.no_forecast.code is ReasonCode.NO_FORECAST


@pytest.mark.parametrize("n,code", [
    (needs(3, 5), ReasonCode.FORECAST_PRESCALE),
    (needs(3, 2, queue=True), ReasonCode.QUEUE_BACKLOG),
    (needs(3, None, why=NO_FC), ReasonCode.NO_FORECAST),
    (needs(3, 2), ReasonCode.REACTIVE_LOAD),
])
def test_need_reason_says_where_the_number_came_from(n, code) -> None:
    why = need_reason(CFG, n, 300.0, 900.0, 40.0)
    assert why.code is code
    assert "current load unknown" not in why.text
    unknown = need_reason(CFG, ScaleNeeds(**{**{f: getattr(n, f) for f in ScaleNeeds.__slots__},
                                              "load_known": False}), 300.0, 900.0, 40.0)
    assert unknown.code is code and unknown.text.endswith("(current load unknown: no scale-in on it)")


def test_apply_guardrails_records_every_stage_and_the_last_that_changed() -> None:
    ctx = GuardrailContext(CFG, T0, 4, PolicyState(), 50)
    n, steps, why = apply_guardrails(50, ctx)
    assert [s.stage for s in steps] == [name for name, _ in GUARDRAILS]
    assert n == 10 and why.code is ReasonCode.MAX_REPLICAS
    assert steps[0].before == 50 and steps[-1].after == 10
    n, steps, why = apply_guardrails(4, GuardrailContext(CFG, T0, 4, PolicyState(), 4))
    assert (n, why) == (4, None) and all(s.before == s.after for s in steps)


def test_scale_action() -> None:
    assert [scale_action(d, 3) for d in (4, 2, 3)] == [ScaleAction.UP, ScaleAction.DOWN, ScaleAction.HOLD]


def test_hold_reason() -> None:
    assert hold_reason(CFG, needs(2, 5), 5).code is ReasonCode.FORECAST_BLOCKS_SCALE_IN
    assert hold_reason(CFG, needs(5, None, why=NO_FC), 5).code is ReasonCode.NO_FORECAST
    assert hold_reason(CFG, needs(5, 4), 5).code is ReasonCode.NO_CHANGE


def test_next_scale_state_keeps_the_window_and_the_last_scale_times() -> None:
    old = PolicyState(history=((T0 - minutes(6), 9), (T0 - minutes(2), 7)), last_scale_down=T0 - minutes(30))
    st = next_scale_state(CFG, old, T0, 4, ScaleAction.UP)
    assert st.history == ((T0 - minutes(2), 7), (T0, 4))
    assert (st.last_scale_up, st.last_scale_down, st.scale_actions) == (T0, T0 - minutes(30), 1)
    st = next_scale_state(CFG, st, T0 + minutes(1), 4, ScaleAction.HOLD)
    assert (st.last_scale_up, st.scale_actions, len(st.history)) == (T0, 1, 3)


def guard(current: int, state: PolicyState = PolicyState(), **cfg) -> GuardrailContext:
    """The context a guardrail stage sees: ``current`` replicas now, CFG with ``cfg`` changed."""
    return GuardrailContext(replace(CFG, **cfg), T0, current, state, 0)


def test_stage_stabilisation_holds_scale_in_at_the_window_high() -> None:
    recent = PolicyState(history=((T0 - minutes(6), 9), (T0 - minutes(2), 7)))
    n, why = stage_stabilisation(3, guard(8, recent))
    assert n == 7 and why.code is ReasonCode.STABILISATION and "recommendation of 7" in why.text
    assert stage_stabilisation(3, guard(5, recent))[0] == 5                # never above the current count
    assert stage_stabilisation(9, guard(8, recent)) == (9, None)          # scale-up: not its business


def test_stage_max_step_limits_each_direction() -> None:
    n, why = stage_max_step(9, guard(4, max_step_up=2))
    assert (n, why.code, why.text) == (6, ReasonCode.MAX_STEP, "at most 2 replicas added per step")
    n, why = stage_max_step(1, guard(4, max_step_down=1))
    assert (n, why.code, why.text) == (3, ReasonCode.MAX_STEP, "at most 1 replicas removed per step")
    assert stage_max_step(9, guard(4)) == (9, None)


def test_stage_cooldown_holds_the_current_count_after_a_recent_action() -> None:
    just_scaled = PolicyState(last_scale_up=T0 - minutes(2))
    n, why = stage_cooldown(2, guard(4, just_scaled))
    assert (n, why.code) == (4, ReasonCode.COOLDOWN_DOWN) and "120 s ago" in why.text
    n, why = stage_cooldown(6, guard(4, just_scaled, cooldown_up_s=300))
    assert (n, why.code) == (4, ReasonCode.COOLDOWN_UP)
    assert stage_cooldown(6, guard(4, just_scaled)) == (6, None)          # no scale-up cooldown set
    assert stage_cooldown(2, guard(4)) == (2, None)                       # never scaled


def test_stage_bounds_caps_and_floors() -> None:
    n, why = stage_bounds(12, guard(4))
    assert (n, why.code, why.text) == (10, ReasonCode.MAX_REPLICAS, "capped at max_replicas 10 (asked for 12)")
    n, why = stage_bounds(0, guard(4))
    assert (n, why.code, why.text) == (1, ReasonCode.MIN_REPLICAS, "kept at min_replicas 1")
    assert stage_bounds(5, guard(4)) == (5, None)


def test_stage_gpu_budget_caps_at_what_the_budget_buys() -> None:
    n, why = stage_gpu_budget(8, guard(4, gpu_budget=10, gpus_per_replica=4))
    assert (n, why.code) == (2, ReasonCode.GPU_BUDGET) and "allows 2 replicas of 4 GPU(s) (asked for 8)" in why.text
    assert stage_gpu_budget(2, guard(4, gpu_budget=10, gpus_per_replica=4)) == (2, None)
    assert stage_gpu_budget(50, guard(4)) == (50, None)                   # no budget
