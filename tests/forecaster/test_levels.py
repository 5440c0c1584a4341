"""Live forecasts carry every level a policy can provision for; a policy provisions from
its own level's path; a level the forecast cannot carry is refused when configured."""
from __future__ import annotations

import math
from datetime import timezone

import numpy as np
import pytest

from warmcast.forecast import DEFAULT_QUANTILES
from forecaster.registry import Registry
from forecaster.resolver import resolve_forecaster
from warmcast.errors import InputError
from warmcast.state import forecast_from_dict, forecast_to_dict
from warmup.core.adapters import forecast_input
from warmup.core import CoreConfig, ScalingConfig, TickInput
from warmup.core.engine import decide
from warmup.core.prescale import forecast_need

from fc_synth import synth_frame

FRAME = synth_frame(2, seed=9)


def _replicas_at(fi, quantile: float, capacity: float) -> int | None:
    cfg = CoreConfig(scaling=ScalingConfig(capacity_rpm=capacity, max_replicas=100_000, quantile=quantile,
                                           cold_start_min=15))
    now = fi.origin.replace(tzinfo=timezone.utc)
    return decide(cfg, TickInput(now, (), 0.0, forecast=fi)).scale.forecast_replicas


def test_a_p95_policy_provisions_from_the_stored_p95_path(tmp_path):
    fb, _ = resolve_forecaster(Registry(tmp_path), "chat", FRAME)
    fc = fb.predict(FRAME, horizon=30)  # what the worker forecasts and stores, default levels
    doc = forecast_to_dict(fc)
    assert sorted(float(q) for q in doc["quantiles"]) == list(DEFAULT_QUANTILES)
    fi = forecast_input(forecast_from_dict(doc))
    assert fi.path(0.95) == tuple(doc["quantiles"]["0.95"])
    cap = 1.0  # one replica per request/min: the levels' paths differ by more than that
    lead = 15 + 1  # the window read: now .. now + cold start
    want = {q: math.ceil(max(doc["quantiles"][str(q)][:lead]) / cap - 1e-9) for q in (0.9, 0.95, 0.99)}
    assert want[0.9] < want[0.95] < want[0.99], "the test needs distinct levels to tell them apart"
    for q in (0.9, 0.95, 0.99):
        assert _replicas_at(fi, q, cap) == want[q], f"P{q * 100:g} policy"


def test_a_level_outside_the_forecast_is_refused_not_clamped():
    from forecaster.baselines import Persistence

    # a forecast stored with P10/P50/P90 only (as the worker stored them before)
    fc = forecast_from_dict(forecast_to_dict(Persistence().fit(FRAME).predict(FRAME, quantiles=(0.1, 0.5, 0.9))))
    fi = forecast_input(fc)
    with pytest.raises(ValueError, match="outside"):
        fi.path(0.95)
    with pytest.raises(ValueError, match="outside"):
        fc.quantile(0.99)
    need, why, _, _ = forecast_need(ScalingConfig(quantile=0.95), fi, fi.origin.replace(tzinfo=timezone.utc), 100.0)
    assert need is None and "not P95" in why.text  # reactive only, and it says why


def test_an_unavailable_level_is_refused_at_configuration_load():
    """A level between two the live forecast carries is served, interpolated (issue 25: a tuned 0.97 or 0.7
    was refused); one outside them is refused naming the key."""
    from warmcast.config.deployments import demo_deployment
    from workers.coreconfig import core_config

    assert core_config(demo_deployment(), overrides={"scaling": {"quantile": 0.99}}).scaling.quantile == 0.99
    assert core_config(demo_deployment(), overrides={"scaling": {"quantile": 0.97}}).scaling.quantile == 0.97
    for bad in (0.05, 0.995):
        with pytest.raises(InputError, match=f"policy-config scaling.quantile: {bad:g} is outside the levels"):
            core_config(demo_deployment(), overrides={"scaling": {"quantile": bad}})
