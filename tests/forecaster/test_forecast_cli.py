"""The forecaster's commands, run through typer."""
from __future__ import annotations

import json

import pandas as pd
import typer
from typer.testing import CliRunner

import forecaster.cli as fcli
from forecaster.registry import Registry

from fc_synth import synth_frame


def _app():
    app = typer.Typer()
    bt = typer.Typer()
    app.add_typer(bt, name="backtest")
    fcli.register(app, bt)
    return app


def test_backtest_command(tmp_path):
    frame = synth_frame(2.2, seed=3)
    log = tmp_path / "load.csv"
    frame.reset_index().to_csv(log, index=False, date_format="%Y-%m-%d %H:%M:%S")
    out = tmp_path / "bt"
    start = frame.index[2 * 1440 + 60].strftime("%Y-%m-%d %H:%M")
    r = CliRunner().invoke(_app(), ["backtest", "forecast", "--log", str(log), "--test-start", start,
                                    "--out", str(out), "--quick", "--models", "lstm,persistence,seasonal_naive_day"])
    assert r.exit_code == 0, r.output
    assert "persistence" in r.output and "lstm" in r.output
    for f in ("forecasts.csv", "metrics.json", "forecast.png"):
        assert (out / f).exists()
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["models"]) == {"lstm", "persistence", "seasonal_naive_day"}


def test_backtest_command_bad_start(tmp_path):
    frame = synth_frame(1, seed=3)
    log = tmp_path / "load.csv"
    frame.reset_index().to_csv(log, index=False)
    r = CliRunner().invoke(_app(), ["backtest", "forecast", "--log", str(log), "--test-start", "2030-01-01",
                                    "--out", str(tmp_path / "o")])
    assert r.exit_code != 0


def test_train_and_forecast_commands(tmp_path, monkeypatch):
    frame = synth_frame(2, seed=11)
    monkeypatch.setattr(fcli, "_frame", lambda config, deployment: frame)
    monkeypatch.setattr(fcli, "_registry", lambda config: Registry(tmp_path))
    app = _app()
    r = CliRunner().invoke(app, ["train", "--deployment", "chat", "--quick", "--val-hours", "4"])
    assert r.exit_code == 0, r.output
    assert "saved challenger chat/v0001" in r.output
    r = CliRunner().invoke(app, ["forecast", "--deployment", "chat", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert len(data["forecast"]) == 30 and {"p10", "p50", "p90"} <= set(data["forecast"][0])
    assert data["origin"] == (frame.index[-1] + pd.Timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
