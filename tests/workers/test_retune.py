"""The nightly re-tune: the predictive policy's risk chosen for the deployment's SLO on stored history,
stored where the loop reads its overrides, and audited (real Redis)."""
from __future__ import annotations

import time

import pandas as pd

from workers.context import Ctx
from workers.simulate import seed_deployment
from workers.steps import retune


def test_retune_stores_the_cheapest_setting_that_met_the_slo_and_audits_it(ctx: Ctx) -> None:
    now = time.time()
    seed_deployment(ctx, "simdep", mean_rpm=400)
    ctx.state.put("policy-config", "simdep", {"warmup": {"p99_stop_rise": 0.5}})   # an operator's own override
    out = retune.step(ctx, "simdep", validation_days=1.0, now=pd.Timestamp(now, unit="s"))
    assert out.previous == {"quantile": 0.9, "buffer_level": None, "target_utilisation": 1.0, "reactive_utilisation": 1.0,
                            "stabilisation_s": 300.0, "reactive_guard": None, "reactive_guard_window_min": 5}
    # the same knob set bench/fleet_slo.py tunes, the reactive guard included (issue 42)
    assert set(out.knobs) == set(retune.KNOBS) and out.knobs["reactive_guard"] is not None
    row = ctx.state.audit_log("simdep", kind="retune")[0]
    assert "SLO late (wait > 5 s) <= 0.05%" in row["reason"]
    assert ("cheapest of" in out.why) == out.met
    stored = ctx.state.get("policy-config", "simdep")
    assert stored["warmup"] == {"p99_stop_rise": 0.5}                     # kept
    if out.changed:
        assert stored["scaling"] == out.knobs and row["applied"] in (True, "1") and "->" in row["decision"]
        assert ctx.state.get("retuned", "simdep")["knobs"] == out.knobs   # which layer set them
        assert ctx.cfg("simdep").scaling.quantile == out.knobs["quantile"]   # the loop now plans with it
    else:
        assert "scaling" not in stored and row["decision"].startswith("risk unchanged")
    # A second night on the same data chooses the same and changes nothing.
    again = retune.step(ctx, "simdep", validation_days=1.0, now=pd.Timestamp(now, unit="s"))
    assert again.knobs == out.knobs and not again.changed


def test_retune_starts_from_the_declared_knobs_not_from_its_last_answer(ctx: Ctx) -> None:
    """A second night on the same data once chose quantile 0.97 after 0.95 (CI): stage 1 grids the
    quantile at the stored utilisation and stabilisation, which the first night had just changed."""
    now = pd.Timestamp(time.time(), unit="s")
    seed_deployment(ctx, "simdep", mean_rpm=400)
    fresh = retune.step(ctx, "simdep", validation_days=1.0, now=now)
    odd = {"quantile": 0.5, "target_utilisation": 0.9, "stabilisation_s": 900.0}
    ctx.state.put("policy-config", "simdep", {"scaling": odd})
    again = retune.step(ctx, "simdep", validation_days=1.0, now=now)
    assert {k: again.previous[k] for k in odd} == odd
    assert again.knobs == fresh.knobs


def test_retune_on_too_little_history_says_so_and_changes_nothing(ctx: Ctx) -> None:
    idx = pd.date_range(pd.Timestamp.now().floor("min") - pd.Timedelta(hours=6), periods=300, freq="min")
    ctx.store.upsert_frame("simdep", pd.DataFrame({"requests": 50.0}, index=idx.rename("time")))
    out = retune.step(ctx, "simdep", validation_days=1.0)
    assert not out.changed and "too few to re-tune" in out.why
    assert ctx.state.get("policy-config", "simdep") is None
    assert ctx.state.audit_log("simdep", kind="retune")[0]["decision"] == "risk unchanged"


def test_retune_replays_what_the_live_loop_runs_and_its_audit_names_it(ctx: Ctx) -> None:
    """Issue 25: the retune replays the forecaster that serves, the calibrated capacity and the measured
    lead (it replayed seasonal naive at the declared capacity and the file's cold start before)."""
    from warmup.calibration.store import CalibrationStore
    from workers import lead

    now = time.time()
    seed_deployment(ctx, "simdep", mean_rpm=400)
    CalibrationStore(ctx.r, ctx.prefix).put("simdep", "day", {"capacity": {"rpm": 150.0, "rps": 2.5},
                                                              "created_at": "2026-11-30T23:00:00Z"})
    lead.record(ctx, "simdep", [60.0, 90.0, 120.0])            # measured launch-to-ready: P90 114 s
    retune.step(ctx, "simdep", validation_days=1.0, now=pd.Timestamp(now, unit="s"))
    row = ctx.state.audit_log("simdep", kind="retune")[0]
    inputs = row["inputs"]
    assert inputs["capacity_rpm"] == 150.0 and inputs["capacity_source"] == "calibrated", inputs
    assert inputs["lead_min"] == 1.9 and inputs["lead_source"].startswith("measured"), inputs
    assert inputs["forecaster_why"], inputs                             # why the resolver chose it
    if inputs["forecaster"].endswith("(shipped)"):                       # named with its version
        from forecaster.resolver import shipped_model

        assert inputs["forecaster"] == f"lstm {shipped_model()[0].version} (shipped)", inputs
        assert "beats the baselines" in inputs["forecaster_why"], inputs
    else:
        assert inputs["forecaster"].endswith("(baselines)") and "fallback to" in inputs["forecaster_why"], inputs
    assert (f"replayed {inputs['forecaster']} at 150 req/min per replica (calibrated) with a 1.9-min lead "
            "(measured launches") in row["reason"], row["reason"]


def test_the_replay_uses_the_baseline_that_answers_live_when_no_trained_model_serves(ctx: Ctx, monkeypatch) -> None:
    """Where the resolver falls back, the retune replays the baseline the live forecast comes from, refitted
    on the replay's past (cheap), not a fixed one; where a trained model serves it only predicts."""
    from forecaster import resolver
    from forecaster.registry import Registry

    seed_deployment(ctx, "simdep", mean_rpm=400)
    frame = ctx.store.frame("simdep")
    model, name, _ = retune.serving_model(ctx, "simdep", frame)
    if name.endswith("(shipped)"):                                       # trained: predicts, never refits
        assert isinstance(model, resolver.AsFitted) and model.fit(frame) is model
    monkeypatch.setattr(resolver, "shipped_model", lambda: (None, "no shipped model in this test"))
    model, name, why = retune.serving_model(ctx, "simdep", frame)
    live, _ = resolver.resolve_forecaster(Registry(ctx.settings.models_dir), "simdep", frame)
    answered = live.predict(frame, horizon=30).model                   # what the forecast step serves
    assert model.name == answered and name == f"{answered} (baselines)", (name, answered)
    assert why.startswith(f"fallback to {answered}: no trained model for 'simdep'") and "no shipped model" in why


def test_a_level_between_the_stored_ones_is_accepted_and_served_live(ctx: Ctx) -> None:
    """A tuned 0.7 was undeployable: live accepted only the stored levels.  The core interpolates the path."""
    from datetime import datetime, timezone

    import pytest

    from warmcast.errors import InputError
    from warmup.core import ForecastInput, plan_replicas

    ctx.state.put("policy-config", "simdep", {"scaling": {"quantile": 0.7}})
    cfg = ctx.cfg("simdep")
    assert cfg.scaling.quantile == 0.7
    origin = datetime(2026, 1, 5, 12, tzinfo=timezone.utc)
    fc = ForecastInput(origin, (0.1, 0.5, 0.9, 0.95, 0.99), tuple((v,) * 30 for v in (100, 400, 800, 900, 1000)))
    want = {q: plan_replicas(replace_quantile(cfg, q), fc, origin)[0].desired for q in (0.5, 0.7, 0.9)}
    assert want[0.5] < want[0.7] < want[0.9], want        # 0.7 plans on the 600 req/min between the two
    for bad in (0.05, 0.995):
        ctx.state.put("policy-config", "simdep", {"scaling": {"quantile": bad}})
        with pytest.raises(InputError, match="policy-config scaling.quantile"):
            ctx.cfg("simdep")


def replace_quantile(cfg, q: float):
    from dataclasses import replace

    return replace(cfg, scaling=replace(cfg.scaling, quantile=q, target_utilisation=1.0))
