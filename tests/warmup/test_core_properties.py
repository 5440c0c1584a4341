"""Property tests (Hypothesis) of the pre-scaler's guardrails over arbitrary inputs."""
from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wu_helpers import T0, fleet
from warmup.core import ForecastInput, PolicyState, ScalingConfig, decide_scale
from warmup.core.guardrails import hard_cap

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

rpm = st.one_of(st.floats(min_value=0, max_value=50_000, allow_nan=False), st.just(float("nan")),
                st.just(float("inf")))
path = st.lists(st.floats(min_value=0, max_value=50_000, allow_nan=False), min_size=30, max_size=30)


@st.composite
def configs(draw):
    lo = draw(st.integers(0, 20))
    hi = draw(st.integers(max(lo, 1), 60))
    gpus = draw(st.integers(0, 4))
    budget = draw(st.one_of(st.none(), st.integers(0, 200)))
    return ScalingConfig(
        capacity_rpm=draw(st.floats(10, 2000)), min_replicas=lo, max_replicas=hi, gpus_per_replica=gpus,
        gpu_budget=budget, cold_start_min=draw(st.floats(0, 30)), margin_min=draw(st.floats(0, 5)),
        quantile=draw(st.sampled_from([0.5, 0.8, 0.9, 0.95])),
        target_utilisation=draw(st.floats(0.3, 1.0)), reactive_utilisation=draw(st.floats(0.3, 1.0)),
        stabilisation_s=draw(st.sampled_from([0.0, 60.0, 300.0])),
        cooldown_down_s=draw(st.sampled_from([0.0, 120.0, 300.0])),
        cooldown_up_s=draw(st.sampled_from([0.0, 60.0])),
        max_step_up=draw(st.one_of(st.none(), st.integers(1, 10))),
        max_step_down=draw(st.one_of(st.none(), st.integers(1, 10))),
        forecast_smoothing_min=draw(st.sampled_from([1, 3])),
        reactive_guard=draw(st.one_of(st.none(), st.sampled_from([0.5, 0.7, 0.86]))),
        reactive_guard_window_min=draw(st.sampled_from([1, 5, 15])),
    )


@st.composite
def states(draw):
    ago = st.one_of(st.none(), st.integers(0, 900))
    up, down = draw(ago), draw(ago)
    hist = draw(st.lists(st.tuples(st.integers(0, 900), st.integers(0, 80)), max_size=6))
    return PolicyState(
        last_scale_up=None if up is None else T0 - timedelta(seconds=up),
        last_scale_down=None if down is None else T0 - timedelta(seconds=down),
        history=tuple(sorted(((T0 - timedelta(seconds=s), r) for s, r in hist), key=lambda x: x[0])),
    )


LEVELS = (0.1, 0.5, 0.8, 0.9, 0.95)  # every level the configs draw: an absent one is refused, not clamped


def forecast_of(p50: list[float], spread: float = 0.2) -> ForecastInput:
    scale = {0.1: 1 - spread, 0.5: 1.0, 0.8: 1 + spread / 2, 0.9: 1 + spread, 0.95: 1 + 1.5 * spread}
    return ForecastInput(T0, LEVELS, tuple(tuple(x * scale[q] for x in p50) for q in LEVELS))


@SETTINGS
@given(cfg=configs(), ready=st.integers(0, 70), booting=st.integers(0, 10), obs=rpm,
       q=st.floats(0, 5000, allow_nan=False), p=st.one_of(st.none(), path), state=states())
def test_bounds_and_budget_always_hold(cfg, ready, booting, obs, q, p, state) -> None:
    fc = forecast_of(p) if p is not None else None
    d, new = decide_scale(cfg, T0, fleet(ready, booting), obs, q, fc, state)
    cap = hard_cap(cfg)
    assert d.desired <= cfg.max_replicas
    assert d.desired <= cap
    assert d.desired >= min(cfg.min_replicas, cap)
    assert d.reason is not None and d.reason.text
    assert new.history[-1] == (T0, d.raw)


@SETTINGS
@given(cfg=configs(), ready=st.integers(0, 70), obs=rpm, p=st.one_of(st.none(), path), state=states())
def test_no_scale_in_inside_cooldown(cfg, ready, obs, p, state) -> None:
    fc = forecast_of(p) if p is not None else None
    current = ready
    last = state.last_scale
    inside = last is not None and (T0 - last).total_seconds() < cfg.cooldown_down_s
    within_bounds = min(cfg.min_replicas, hard_cap(cfg)) <= current <= hard_cap(cfg)
    d, _ = decide_scale(cfg, T0, fleet(ready), obs, 0.0, fc, state)
    if inside and within_bounds:
        assert d.desired >= current


@SETTINGS
@given(cfg=configs(), ready=st.integers(0, 70), obs=rpm, p=path, bump=path, state=states())
def test_desired_never_falls_as_forecast_rises(cfg, ready, obs, p, bump, state) -> None:
    lo = forecast_of(p)
    hi = forecast_of([a + b for a, b in zip(p, bump)])
    d_lo, _ = decide_scale(cfg, T0, fleet(ready), obs, 0.0, lo, state)
    d_hi, _ = decide_scale(cfg, T0, fleet(ready), obs, 0.0, hi, state)
    assert d_hi.desired >= d_lo.desired


def _guard_says(d, what: str) -> bool:
    """Whether the reactive guard's step moved the number and its reason names ``what`` (issue 42)."""
    return any(s.stage == "reactive_guard" and s.after > s.before and s.reason is not None and what in s.reason.text
               for s in d.steps)


@SETTINGS
@given(cfg=configs(), ready=st.integers(0, 70), obs=rpm, p=path, state=states())
def test_max_step_holds_within_bounds(cfg, ready, obs, p, state) -> None:
    """With the reactive guard on, a step past max_step_up is the guard's and its reason says so."""
    cap = hard_cap(cfg)
    d, _ = decide_scale(cfg, T0, fleet(ready), obs, 0.0, forecast_of(p), state)
    if cfg.min_replicas <= ready <= cap:
        if cfg.max_step_up is not None and d.desired - ready > cfg.max_step_up:
            assert cfg.reactive_guard is not None and _guard_says(d, f"max_step_up {cfg.max_step_up}"), d.steps
        if cfg.max_step_down is not None:
            assert ready - d.desired <= cfg.max_step_down


@SETTINGS
@given(cfg=configs(), ready=st.integers(0, 70), obs=rpm, p=path, state=states())
def test_no_scale_up_inside_its_cooldown_unless_the_guard_says_so(cfg, ready, obs, p, state) -> None:
    last = state.last_scale
    inside = last is not None and (T0 - last).total_seconds() < cfg.cooldown_up_s
    d, _ = decide_scale(cfg, T0, fleet(ready), obs, 0.0, forecast_of(p), state)
    if inside and cfg.min_replicas <= ready <= hard_cap(cfg) and d.desired > ready:
        assert _guard_says(d, "scale-up cooldown"), d.steps


def test_the_guard_past_max_step_says_so() -> None:
    """The reported case: 2 replicas to 19 with max_step_up 1, the guard's reason silent about it."""
    cfg = ScalingConfig(capacity_rpm=100.0, min_replicas=1, max_replicas=40, max_step_up=1, reactive_guard=0.5,
                        reactive_guard_window_min=5, cooldown_down_s=0.0)
    d, _ = decide_scale(cfg, T0, fleet(2), 950.0, 0.0, None, PolicyState())
    assert d.desired == 19 and d.reason.code.value == "reactive_guard", d.reason
    assert "goes past max_step_up 1 (+17 from 2)" in d.reason.text


@SETTINGS
@given(cfg=configs(), ready=st.integers(0, 70), obs=st.floats(0, 50_000), p=path)
def test_forecast_is_a_floor_above_the_reactive_need(cfg, ready, obs, p) -> None:
    # With no guardrail in the way (fresh state, loose bounds) the decision covers both needs.
    cfg2 = ScalingConfig(capacity_rpm=cfg.capacity_rpm, min_replicas=0, max_replicas=10**9,
                         quantile=cfg.quantile, target_utilisation=cfg.target_utilisation,
                         reactive_utilisation=cfg.reactive_utilisation, cold_start_min=cfg.cold_start_min)
    d, _ = decide_scale(cfg2, T0, fleet(ready), obs, 0.0, forecast_of(p), PolicyState())
    assert d.raw == max(d.reactive_replicas, d.forecast_replicas)
    if d.raw >= ready:
        assert d.desired == d.raw
