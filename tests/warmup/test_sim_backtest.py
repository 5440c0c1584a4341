"""The fleet backtest end to end: outputs, no peeking, the sharp ramp, speed."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from wu_helpers import synthetic_minutes
from warmup.core import CoreConfig, ScalingConfig
from warmup.sim import FleetBacktestConfig, compute_forecasts, from_series, load_log, run_backtest, write_outputs
from warmup.sim.backtest import make_split, run_policy

START = pd.Timestamp("2024-01-03")


def cfg(**kw) -> FleetBacktestConfig:
    base = dict(capacity_rpm=300.0, cold_start_min=15, test_start=START, forecaster="sim_seasonal_profile",
                reactive_utilisation=0.8)
    base.update(kw)
    return FleetBacktestConfig(**base)


@pytest.fixture(scope="module")
def minute_log():
    return from_series(synthetic_minutes(days=4, mean=1500.0, seed=1), source="synthetic")


@pytest.fixture(scope="module")
def result(minute_log):
    return run_backtest(minute_log, cfg(record_decisions=True))


def test_outputs_written(result, tmp_path) -> None:
    paths = write_outputs(result, tmp_path)
    names = {p.name for p in paths}
    for pol in ("static", "reactive", "queue", "predictive", "oracle"):
        assert f"plan_{pol}.csv" in names
        plan = pd.read_csv(tmp_path / f"plan_{pol}.csv")
        assert list(plan.columns) == ["time", "replicas"]
        assert len(plan) == 2 * 1440
        assert plan["time"].iloc[0] == "2024-01-03 00:00:00" and plan["time"].iloc[-1] == "2024-01-04 23:59:00"
        assert (plan["replicas"] >= 1).all()
    rep = json.loads((tmp_path / "report.json").read_text())
    for pol, row in rep["policies"].items():
        for key in ("gpu_hours", "late_share", "minutes_short", "scale_actions", "warmups", "profile_switches"):
            assert key in row, (pol, key)
    assert rep["policies"]["oracle"]["gpu_hours_vs_oracle"] == 1.0
    assert rep["meta"]["forecaster"] == "sim_seasonal_profile"
    assert (tmp_path / "fleet.png").stat().st_size > 10_000
    dec = pd.read_csv(tmp_path / "decisions_predictive.csv")
    assert len(dec) == 2 * 1440 and dec["reason"].notna().all() and dec["text"].str.len().min() > 0


def test_policy_sanity(result) -> None:
    rows = result.rows
    assert rows["static"]["late_share"] == 0.0                       # sized at the hindsight peak
    assert rows["static"]["gpu_hours"] > rows["reactive"]["gpu_hours"] > rows["oracle"]["gpu_hours"]
    assert rows["predictive"]["gpu_hours"] >= rows["oracle"]["gpu_hours"] * 0.95
    # GPU-hours are the provisioned instance-minutes of the plan.
    for name, run in result.runs.items():
        assert rows[name]["gpu_hours"] == pytest.approx(run.provisioned.sum() / 60, abs=1e-3)


def test_no_peeking_predictive_plan(minute_log) -> None:
    """Changing the log after minute t leaves the predictive plan up to t unchanged."""
    c = cfg(policies=("predictive",))
    base = run_backtest(minute_log, c).runs["predictive"]
    s = minute_log.minute.copy()
    split = make_split(minute_log, START)
    t = 700                                    # a test minute
    cut = split.i0 + t
    s.iloc[cut:] = s.iloc[cut:] * 3.0 + 500    # the future changes a lot
    changed = run_backtest(from_series(s), c).runs["predictive"]
    assert np.array_equal(base.provisioned[:t + 1], changed.provisioned[:t + 1])
    assert not np.array_equal(base.provisioned[t + 1:], changed.provisioned[t + 1:])


def test_no_peeking_with_the_lstm(minute_log) -> None:
    from forecaster.lstm import LSTMConfig, LSTMForecaster

    c = cfg(policies=("predictive",), forecaster="lstm")
    split = make_split(minute_log, START)
    t = 400

    def plan(log):
        model = LSTMForecaster(LSTMConfig.tiny(epochs=2, max_origins=3000), progress=False)
        bundle = compute_forecasts(log, c, (0.1, 0.5, 0.9), model=model)
        return run_policy("predictive", make_split(log, START), c, bundle).provisioned

    base = plan(minute_log)
    s = minute_log.minute.copy()
    s.iloc[split.i0 + t:] *= 2.5
    changed = plan(from_series(s))
    assert np.array_equal(base[:t + 1], changed[:t + 1])
    assert not np.array_equal(base, changed)


def test_sharp_ramp_predictive_ready_reactive_late() -> None:
    log = from_series(synthetic_minutes(days=4, mean=1500.0, seed=2, ramp_at=8 * 60))
    # The small test model smooths its daily profile over 5 minutes, so it is given a
    # 3-minute margin on top of the cold start (the LSTM in bench/fleet.py needs none).
    core = CoreConfig(scaling=ScalingConfig(margin_min=3))
    res = run_backtest(log, cfg(policies=("reactive", "predictive", "oracle"), core=core))
    times = res.split.times
    ramp = np.flatnonzero((times.hour == 8) & (times.minute == 0))
    for r in ramp:
        window = slice(r, r + 20)
        need = res.split.demand[window]
        pred_cap = res.runs["predictive"].ready[window] * 300
        reac_cap = res.runs["reactive"].ready[window] * 300
        assert (pred_cap[1:] >= need[1:] * 0.9).all()           # ready as the ramp arrives
        assert (reac_cap < need * 0.8).sum() >= 10                # reactive waits for its cold start
    assert res.rows["predictive"]["late_share"] < 0.1 * res.rows["reactive"]["late_share"]


def test_ten_second_log_and_per_request_log(tmp_path) -> None:
    idx = pd.date_range("2024-01-01", periods=3 * 1440 * 6, freq="10s")
    rng = np.random.default_rng(0)
    mod = (idx.hour * 60 + idx.minute).to_numpy()
    rate = 250 * (0.65 + 0.35 * np.cos(2 * np.pi * (mod / 60.0 - 14) / 24))
    counts = pd.DataFrame({"time": idx.strftime("%Y-%m-%d %H:%M:%S"), "requests": rng.poisson(rate)})
    p = tmp_path / "ten.csv"
    counts.to_csv(p, index=False)
    log = load_log(p)
    assert log.step_s == 10 and log.minutes == 3 * 1440
    res = run_backtest(log, cfg(test_start=pd.Timestamp("2024-01-03"), policies=("reactive", "oracle")))
    assert res.meta["resolution_s"] == 10
    # A per-request log (Azure trace columns) replays too.
    ts = pd.Timestamp("2024-01-01") + pd.to_timedelta(np.sort(rng.uniform(0, 2 * 86400, 20000)), unit="s")
    req = pd.DataFrame({"TIMESTAMP": ts.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": 100,
                        "GeneratedTokens": 50})
    p2 = tmp_path / "requests.csv"
    req.to_csv(p2, index=False)
    log2 = load_log(p2)
    assert log2.step_s == 10 and abs(log2.arrivals.sum() - 20000) < 1
    res2 = run_backtest(log2, cfg(test_start=pd.Timestamp("2024-01-02"), policies=("static", "oracle")))
    assert res2.rows["static"]["late_share"] == 0.0


def test_week_of_minutes_all_policies() -> None:
    # The speed target (a week in under a minute) is measured by bench/fleet.py, not asserted here.
    log = from_series(synthetic_minutes(days=14, mean=3000.0, seed=3))
    c = cfg(test_start=pd.Timestamp("2024-01-08"))
    bundle = compute_forecasts(log, c, (0.1, 0.5, 0.9))
    res = run_backtest(log, c, bundle=bundle)
    assert res.split.minutes == 7 * 1440 and len(res.rows) == 5
    assert all(len(r.provisioned) == 7 * 1440 for r in res.runs.values())
    assert res.meta["simulation_seconds"] > 0


def test_bad_test_start(minute_log) -> None:
    from warmcast.errors import InputError

    with pytest.raises(InputError, match="test-start"):
        run_backtest(minute_log, cfg(test_start=pd.Timestamp("2030-01-01")))


def _demo(route: bool):
    from warmcast.config.deployments import RouteSpec, demo_deployment
    from warmup.core.adapters import core_config

    dep = demo_deployment()   # day 300 rpm; night 200 rpm from 22:00 to 07:00 UTC
    if route:
        dep = dep.model_copy(update={"route": RouteSpec(httproute="demo", backends={"day": "d", "night": "n"})})
    log = from_series(synthetic_minutes(days=4, mean=1500.0, seed=6))
    return run_backtest(log, cfg(policies=("predictive", "oracle"), core=core_config(dep), max_replicas=40))


def test_under_round_robin_a_night_canary_beside_busy_day_replicas_is_rolled_back() -> None:
    """Issue 42: no calibration, so each profile is read on the default curve.  At 22:00 the day replicas
    are busy and round robin gives the night canary (200 req/min a replica) as many requests as each day
    one (300): past its capacity, its P99 trips the breaker.  The quiet 00:00 switch goes through."""
    res = _demo(route=False)
    run = res.runs["predictive"]
    texts = [e[2] for e in run.events if e[1] == "rollback"]
    assert texts and all("during the canary" in t and "above the pre-switch baseline" in t for t in texts), texts
    assert res.rows["predictive"]["switch_rollbacks"] == len(texts) >= 1
    assert run.ttft_p99_ms is not None and np.isfinite(run.ttft_p99_ms).all()


def test_profile_switches_are_simulated(tmp_path) -> None:
    res = _demo(route=True)   # a weighted route: the canary gets its 10% by weight
    run = res.runs["predictive"]
    # Two test days: evening and morning switches complete (the first morning one starts at 06:30).
    assert res.rows["predictive"]["profile_switches"] >= 3
    kinds = [e[1] for e in run.events]
    assert "switch" in kinds
    assert run.capacity is not None and set(np.unique(run.capacity)) >= {200.0, 300.0}
    night = res.split.times.hour == 2
    assert (run.capacity[night] == 200.0).all()
    # A switch is launches of the target one cold start (15 min) ahead and removals of the old as the
    # target becomes ready: it costs GPU-hours, never ready capacity (no request late during one).
    row = res.rows["predictive"]
    assert row["switch_gpu_hours"] > 0 and row["late_during_switches"] == 0.0
    starts = res.split.times[np.flatnonzero(np.diff(run.switching.astype(int)) == 1) + 1]
    assert {t.strftime("%H:%M") for t in starts} == {"21:45", "06:45"}


def test_a_coarse_series_is_forecast_in_its_bins_from_ended_bins_only():
    """Issue 11: a 10-minute series' bin is known only when it ends.  Spread over its minutes, the
    bin used to reach the forecaster at its first minute; now each minute's forecast comes from the
    bins before its own (persistence: the last ended bin, as a per-minute share)."""
    t = pd.date_range("2024-03-04", periods=3 * 144, freq="10min")
    counts = pd.Series(np.arange(len(t), dtype=float) * 10 + 1000, index=t)
    log = from_series(counts, source="ten-minute")
    cfg = FleetBacktestConfig(capacity_rpm=50, cold_start_min=5, test_start=pd.Timestamp("2024-03-06 00:00"),
                              forecaster="persistence")
    bundle = compute_forecasts(log, cfg, [0.5])
    p50 = bundle.paths[0.5]
    for i, minute in enumerate(pd.date_range("2024-03-06 00:00", periods=30, freq="min")):
        ended = counts[counts.index + pd.Timedelta(minutes=10) <= minute].iloc[-1]
        np.testing.assert_allclose(p50[i, 0], ended / 10, rtol=1e-6)
    assert log.resolution_min == 10 and len(log.forecast_frame()) == len(t)
