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
    assert out.previous == {"quantile": 0.9, "target_utilisation": 1.0, "stabilisation_s": 300.0}
    row = ctx.state.audit_log("simdep", kind="retune")[0]
    assert "SLO late (wait > 5 s) <= 0.05%" in row["reason"]
    assert ("cheapest of" in out.why) == out.met
    stored = ctx.state.get("policy-config", "simdep")
    assert stored["warmup"] == {"p99_stop_rise": 0.5}                     # kept
    if out.changed:
        assert stored["scaling"] == out.knobs and row["applied"] in (True, "1") and "->" in row["decision"]
        assert ctx.cfg("simdep").scaling.quantile == out.knobs["quantile"]   # the loop now plans with it
    else:
        assert "scaling" not in stored and row["decision"].startswith("risk unchanged")
    # A second night on the same data chooses the same and changes nothing.
    again = retune.step(ctx, "simdep", validation_days=1.0, now=pd.Timestamp(now, unit="s"))
    assert again.knobs == out.knobs and not again.changed


def test_retune_on_too_little_history_says_so_and_changes_nothing(ctx: Ctx) -> None:
    idx = pd.date_range(pd.Timestamp.now().floor("min") - pd.Timedelta(hours=6), periods=300, freq="min")
    ctx.store.upsert_frame("simdep", pd.DataFrame({"requests": 50.0}, index=idx.rename("time")))
    out = retune.step(ctx, "simdep", validation_days=1.0)
    assert not out.changed and "too few to re-tune" in out.why
    assert ctx.state.get("policy-config", "simdep") is None
    assert ctx.state.audit_log("simdep", kind="retune")[0]["decision"] == "risk unchanged"
