"""Risk chosen from history: SLO tuning reads only the days before the test start, picks the cheapest
setting that met the SLO there, tunes the baselines the same way, and says why."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from test_fleet_cli import app
from wu_helpers import synthetic_minutes
from warmcast.config.slo import SLO
from warmup.sim import FleetBacktestConfig, from_series, run_backtest
from warmup.sim.risk import pick, tune

TS = pd.Timestamp("2024-01-04")
GRIDS = {"predictive": [{"quantile": q, "buffer_level": b} for q in (0.5, 0.9) for b in (None, 0.99)],
         "predictive_stage2": [{"target_utilisation": 0.9, "stabilisation_s": 300.0}],
         "reactive": [{"target_utilisation": u} for u in (0.6, 0.8, 0.95)],
         "queue": [{"target_waiting": w} for w in (1.0, 10.0)]}


def cfg(**kw) -> FleetBacktestConfig:
    base = dict(capacity_rpm=300.0, cold_start_min=15, test_start=TS, forecaster="sim_seasonal_profile")
    base.update(kw)
    return FleetBacktestConfig(**base)


@pytest.fixture(scope="module")
def series() -> pd.Series:
    return synthetic_minutes(days=4, mean=1500.0, seed=11)


@pytest.fixture(scope="module")
def tuning(series):
    return tune(from_series(series), cfg(), SLO(late_share=0.0005), validation_days=1.0, grids=GRIDS)


def test_tuning_reads_nothing_from_the_test_part(series, tuning) -> None:
    wild = series.copy()
    wild[wild.index >= TS] *= np.linspace(0.1, 8.0, int((wild.index >= TS).sum()))
    again = tune(from_series(wild), cfg(), SLO(late_share=0.0005), validation_days=1.0, grids=GRIDS)
    assert again.knobs() == tuning.knobs()
    assert again.choices["predictive"].table == tuning.choices["predictive"].table
    assert tuning.window == ("2024-01-03 00:00:00", "2024-01-04 00:00:00")


def test_each_policy_gets_the_cheapest_setting_that_met_the_slo(tuning) -> None:
    for name, c in tuning.choices.items():
        ok = [r for r in c.table if r["late_share"] <= 0.0005]
        if c.met:
            assert c.knobs == min(ok, key=lambda r: r["gpu_hours"])["knobs"], name
            assert "cheapest of" in c.why
        else:
            assert not ok and "none of" in c.why
    # stage 1 (4 settings x the reactive guard's two windows, issue 27) + stage 2 around the winner (1)
    assert len(tuning.choices["predictive"].table) == 9
    guards = {(r["knobs"]["reactive_guard"], r["knobs"]["reactive_guard_window_min"])
              for r in tuning.choices["predictive"].table}
    hpa = tuning.choices["reactive"].knobs   # the guard is the tuned HPA: its target, its window or 1 min
    assert guards == {(hpa["target_utilisation"], 1), (hpa["target_utilisation"], hpa.get("stabilisation_min", 5))}
    assert "risk tuned for the SLO late (wait > 5 s) <= 0.05%" in tuning.report()


def test_pick_falls_back_to_the_least_late_and_says_so() -> None:
    rows = [{"knobs": {"u": 1}, "late_share": 0.01, "gpu_hours": 5.0, "gpu_x": 1.0, "episodes": 3},
            {"knobs": {"u": 2}, "late_share": 0.002, "gpu_hours": 9.0, "gpu_x": 1.8, "episodes": 1}]
    c = pick("reactive", rows, SLO(late_share=0.0005))
    assert not c.met and c.knobs == {"u": 2} and "none of 2 settings met the SLO" in c.why
    c = pick("reactive", rows, SLO(late_share=0.05))
    assert c.met and c.knobs == {"u": 1}


def test_tuned_knobs_drive_the_backtest_and_are_reported(series, tuning) -> None:
    from dataclasses import replace

    c = replace(cfg(), knobs=tuning.knobs(), tuning=tuning)
    res = run_backtest(from_series(series), c)
    pred = res.rows["predictive"]["params"]
    for k, v in tuning.knobs()["predictive"].items():
        assert pred[k] == v
    assert res.rows["reactive"]["params"]["target_utilisation"] == tuning.knobs()["reactive"]["target_utilisation"]
    assert res.meta["slo_tuning"]["chosen"]["queue"]["knobs"] == tuning.knobs()["queue"]
    assert "late_episodes" in res.rows["predictive"]


def test_cli_tunes_for_the_slo_before_the_test_start(tmp_path: Path, monkeypatch, series) -> None:
    import warmup.sim.risk as risk

    monkeypatch.setattr(risk, "GRIDS", {**risk.GRIDS, **GRIDS})   # a small grid: the same code path, faster
    log = tmp_path / "load.csv"
    series.to_frame().reset_index().assign(time=lambda d: d["time"].dt.strftime("%Y-%m-%d %H:%M:%S")).to_csv(
        log, index=False)
    out = tmp_path / "out"
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--capacity-rpm", "300",
                                     "--test-start", "2024-01-04", "--out", str(out), "--no-plot",
                                     "--forecaster", "sim_seasonal_profile", "--slo-late-share", "0.001",
                                     "--slo-wait-s", "10", "--validation-days", "1"])
    assert res.exit_code == 0, res.output
    assert "late (wait > 10 s) <= 0.1%" in res.output and "predictive: {" in res.output
    meta = json.loads((out / "report.json").read_text())["meta"]
    assert meta["wait_threshold_s"] == 10.0 and meta["slo_tuning"]["slo"]["late_share"] == 0.001
    assert meta["slo_tuning"]["validation"] == ["2024-01-03 00:00:00", "2024-01-04 00:00:00"]


def test_rolling_validation_judges_each_setting_on_its_worst_window_and_says_how_robust(series) -> None:
    t = tune(from_series(series), cfg(), SLO(late_share=0.0005), validation_days=1.0, grids=GRIDS, windows=2,
             policies=("reactive", "queue"))
    assert t.window == ("2024-01-02 00:00:00", "2024-01-04 00:00:00") and "in 2 windows" in t.report()
    for c in t.choices.values():
        for r in c.table:
            assert len(r["late_by_window"]) == 2 and r["late_share"] == max(r["late_by_window"])
        assert "windows; met on" in c.why and "oldest first" in c.why
    wild = series.copy()   # what lies after the test start changes nothing
    wild[wild.index >= TS] *= 5.0
    again = tune(from_series(wild), cfg(), SLO(late_share=0.0005), validation_days=1.0, grids=GRIDS, windows=2,
                 policies=("reactive", "queue"))
    assert again.knobs() == t.knobs()
