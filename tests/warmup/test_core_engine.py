"""The whole tick: decisions with reasons, state in/out, forecast-only mode, adapters."""
from __future__ import annotations

from dataclasses import replace
from datetime import time, timezone

import numpy as np
import pandas as pd

from wu_helpers import T0, flat_forecast, fleet, minutes
from warmup.core.adapters import core_config, core_config_from_values, forecast_input
from warmup.core import (
    CoreConfig,
    PolicyState,
    ReasonCode,
    ScaleAction,
    ScalingConfig,
    SwitchPhase,
    TickInput,
    WarmupAction,
    decide,
)
from warmup.core.engine import breaker_p99, planning_capacity


def tick(cfg=CoreConfig(scaling=ScalingConfig(max_replicas=40)), **kw):
    base = dict(now=T0, instances=fleet(5), observed_rpm=1500.0, queue_depth=0.0, p99_latency_s=1.0,
                forecast=flat_forecast([1500.0] * 5 + [3000.0] * 25), active_profile="day")
    base.update(kw)
    return decide(cfg, TickInput(**base), PolicyState())


def test_tick_returns_all_decisions_with_reasons() -> None:
    out = tick(instances=fleet(5, 2))
    assert out.scale.action is ScaleAction.UP and out.scale.desired == 11
    assert out.scale.reason.code is ReasonCode.FORECAST_PRESCALE
    assert out.warmup.action is WarmupAction.START and out.warmup.tier == "ramp"
    assert out.switch.reason.code is ReasonCode.SWITCH_STEADY
    assert out.applied and out.mode == "live"
    assert out.warmup.instances == ("b0", "b1")   # booting ones: the busy ones are never warmed
    assert "replicas 7->11" in out.summary()


def test_pure_same_input_same_output() -> None:
    assert tick() == tick()


def test_state_round_trips_through_ticks() -> None:
    cfg = CoreConfig(scaling=ScalingConfig(max_replicas=40, stabilisation_s=0))
    inp = TickInput(T0, fleet(5), 1500.0, 0.0, 1.0, flat_forecast(3000.0), "day")
    out1 = decide(cfg, inp, PolicyState())
    inp2 = replace(inp, now=T0 + minutes(1), instances=fleet(5, 6), observed_rpm=300.0,
                   forecast=flat_forecast(300.0, origin=T0 + minutes(1), spread=0.0))
    out2 = decide(cfg, inp2, out1.state)
    # Load collapsed, but the scale-up one minute ago keeps the cooldown: no scale-in.
    assert out2.scale.desired == 11 and out2.scale.reason.code is ReasonCode.COOLDOWN_DOWN
    assert out2.state.scale_actions == 1


def test_forecast_only_mode_records_but_does_not_apply() -> None:
    cfg = CoreConfig(scaling=ScalingConfig(max_replicas=40), dry_run=True)
    out = tick(cfg=cfg)
    live = tick()
    assert out.applied is False and out.mode == "dry_run"
    assert out.scale == live.scale and out.warmup == live.warmup   # the same decision, flagged
    assert "not applied" in out.summary()


def test_planning_capacity_during_switch() -> None:
    from warmcast.config.deployments import demo_deployment

    cfg = core_config(demo_deployment())
    st = PolicyState()
    assert planning_capacity(cfg, st, "day") == 300
    st = replace(st, switch=replace(st.switch, phase=SwitchPhase.CANARY, active_profile="day", target_profile="night"))
    assert planning_capacity(cfg, st, "day") == 200


def test_the_breaker_watches_the_targets_own_p99_inside_a_switch() -> None:
    """Issue 26: a 10% canary 25% slower lifts the fleet's P99 a few percent; its own P99 shows it."""
    from warmcast.config.deployments import demo_deployment

    cfg = core_config(demo_deployment())
    sw = replace(PolicyState().switch, phase=SwitchPhase.CANARY, active_profile="day", target_profile="night",
                 baseline_p99_s=1.0)
    inp = TickInput(T0, fleet(5), 1500.0, p99_latency_s=1.03, p99_by_profile=(("day", 1.0), ("night", 1.25)))
    assert breaker_p99(inp, sw) == 1.25
    assert breaker_p99(replace(inp, p99_by_profile=(("day", 1.0),)), sw) == 1.03      # none of its own: the fleet's
    assert breaker_p99(inp, replace(sw, phase=SwitchPhase.PREWARM)) == 1.03             # before the canary: the fleet's
    out = decide(cfg, inp, replace(PolicyState(), switch=replace(sw, since=T0)))
    assert out.switch.phase is SwitchPhase.ROLLBACK and "P99 1.25 s is 25% above" in out.switch.reason.text


def test_adapter_maps_deployment() -> None:
    from warmcast.config.deployments import demo_deployment

    dep = demo_deployment()
    cfg = core_config(dep, dry_run=True, scaling={"quantile": 0.95})
    s = cfg.scaling
    assert (s.capacity_rpm, s.min_replicas, s.max_replicas, s.cold_start_min, s.quantile) == (300, 1, 40, 15, 0.95)
    assert cfg.dry_run and cfg.switch.enabled and cfg.switch.default_profile == "day"
    assert dict(cfg.switch.profile_capacity) == {"day": 300, "night": 200}
    w = cfg.switch.windows[0]
    assert (w.profile, w.start, w.end) == ("night", time(22, 0), time(7, 0))
    # The pure variant takes plain values (model_dump) and a tz object.
    cfg2 = core_config_from_values(dep.model_dump(mode="json"), timezone.utc)
    assert cfg2.switch.windows == cfg.switch.windows and cfg2.scaling.capacity_rpm == 300


def test_adapter_maps_forecast() -> None:
    from warmcast.forecast import Forecast

    origin = pd.Timestamp("2024-05-17 10:00")
    fc = Forecast(origin=origin, mean=np.full(30, 100.0),
                  quantiles={0.1: np.full(30, 80.0), 0.5: np.full(30, 100.0), 0.9: np.full(30, 130.0)},
                  model="lstm", version="3", extra={"long_context_share": np.full(30, 0.4)})
    fi = forecast_input(fc)
    assert fi.levels == (0.1, 0.5, 0.9) and fi.horizon == 30 and fi.origin.tzinfo is not None
    assert fi.path(0.9)[0] == 130.0 and abs(fi.path(0.7)[0] - 115.0) < 1e-9
    assert fi.extra_path("long_context_share")[0] == 0.4 and fi.model == "lstm:3"
    out = decide(CoreConfig(scaling=ScalingConfig(max_replicas=40)),
                 TickInput(origin.to_pydatetime().replace(tzinfo=timezone.utc), fleet(1), 100.0, forecast=fi))
    assert out.scale.forecast_replicas == 1


def test_pair_lookups_take_the_first_pair_and_fall_back():
    """Profile capacities and extra forecast paths are tuples of pairs: one lookup serves both."""
    from warmup.core.config import SwitchConfig
    from warmup.core.inputs import ForecastInput, first_value

    assert first_value((("a", 1), ("b", 2), ("a", 3)), "a", 0) == 1
    assert first_value((("a", 1),), "z", 0) == 0
    sw = SwitchConfig(profile_capacity=(("day", 300.0), ("night", 200.0)))
    assert sw.capacity_of("night", 1.0) == 200.0 and sw.capacity_of("long", 1.0) == 1.0
    fc = flat_forecast([1.0] * 3)
    fc = replace(fc, extra=(("long_share", (0.5, 0.5, 0.5)),))
    assert isinstance(fc, ForecastInput)
    assert fc.extra_path("long_share") == (0.5, 0.5, 0.5) and fc.extra_path("short") is None
