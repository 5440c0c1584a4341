"""The one tick with a live context-mix trigger (simulated fleet, real Redis): a sustained long share
stored per minute starts the switch, a manual request still wins, a short spike does nothing."""
from __future__ import annotations

import time

import pandas as pd

from workers.context import Ctx
from workers.simulate import seed_deployment
from workers.steps import tick

TWO = ("deployments:\n  - name: simdep\n    cold_start_min: 0.5\n    profiles:\n"
       "      day: {capacity_rpm: 100}\n      night: {capacity_rpm: 80}\n"
       "    schedule: {mix_trigger: {profile: night, long_tokens: 4096, share: 0.3, sustain_min: 10}}\n")


def _ctx(ctx: Ctx, tmp_path) -> Ctx:
    deps = tmp_path / "mix.yaml"
    deps.write_text(TWO)
    c = Ctx(ctx.settings.model_copy(update={"deployments_file": deps}), ctx.options, ctx.r)
    seed_deployment(c, "simdep", mean_rpm=80)
    return c


def _tick(c: Ctx, n: int):
    """One tick (the switch machine runs inside it); its switch fields under the old step's names."""
    out = tick.step(c, "simdep", tick=f"T{n:03d}", run_id=f"r{n}")
    return type("Switch", (), {"action": out.switch, "reason": out.switch_reason, "applied": out.switch_applied,
                               "outcome": out.switch_outcome, "phase": out.phase})()


def _store_shares(c: Ctx, shares: list[float]) -> None:
    now_min = int(time.time() // 60)
    idx = pd.to_datetime([(now_min - len(shares) + k) * 60 for k in range(len(shares))], unit="s")
    c.store.upsert_frame("simdep", pd.DataFrame({"long_share": shares}, index=pd.DatetimeIndex(idx, name="time")))


def test_a_short_spike_does_nothing_and_a_sustained_share_prewarms_the_profile(ctx, tmp_path):
    c = _ctx(ctx, tmp_path)
    out = _tick(c, 1)
    assert out.action == "none" and "day" in out.reason  # no mix reading: the clock (no windows) keeps day
    _store_shares(c, [0.1] * 20 + [0.6] * 5)
    assert _tick(c, 2).action == "none"
    _store_shares(c, [0.1] * 10 + [0.6] * 15)
    out = _tick(c, 3)
    assert out.action == "prewarm" and "mix asks for night" in out.reason and out.applied, out
    rows = c.state.audit_log("simdep", kind="switch")
    assert rows and "long-context share" in rows[0]["reason"]


def test_a_manual_request_wins_over_the_mix(ctx, tmp_path):
    c = _ctx(ctx, tmp_path)
    _store_shares(c, [0.6] * 15)
    c.state.request_profile("simdep", "day", by="test")
    out = _tick(c, 4)
    assert out.action == "none" and "mix" not in out.reason, out
