"""The forecaster's commands, run through typer."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import warmcast.cli.forecast as fcli
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
    monkeypatch.setattr(fcli, "_frame", lambda config, deployment: frame)  # what train reads
    monkeypatch.setattr(fcli, "_history", lambda config, deployment: frame)  # what forecast reads
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


def _backtest(tmp_path, frame, out, models="lstm,persistence,seasonal_naive_day"):
    log = tmp_path / "load.csv"
    if not log.exists():
        frame.reset_index().to_csv(log, index=False, date_format="%Y-%m-%d %H:%M:%S")
    start = frame.index[2 * 1440 + 60].strftime("%Y-%m-%d %H:%M")
    r = CliRunner().invoke(_app(), ["backtest", "forecast", "--log", str(log), "--test-start", start,
                                    "--out", str(out), "--quick", "--models", models])
    assert r.exit_code == 0, r.output
    return r.output


def test_printed_winner_is_the_lowest_mae_in_metrics_json(tmp_path):
    frame = synth_frame(2.2, seed=5)
    text = _backtest(tmp_path, frame, tmp_path / "bt")
    m = json.loads((tmp_path / "bt" / "metrics.json").read_text())
    maes = {k: v["mae"] for k, v in m["models"].items()}
    best = min(maes, key=maes.get)
    assert f"lowest MAE: {best} (MAE {maes[best]:.3f})" in text
    bb = m["best_baseline"]
    diff = maes["lstm"] / bb["mae"] - 1
    word = "lower" if diff < 0 else "higher"
    assert f"lstm MAE {maes['lstm']:.3f} is {abs(diff) * 100:.1f}% {word} than the best baseline {bb['model']}" in text


def test_plot_draws_whatever_models_have_an_mae(tmp_path):
    """A model skipped, or with no finite forecast, is left out of the plot instead of crashing it."""
    import numpy as np

    from forecaster.backtest import run_backtest, write_outputs
    from forecaster.base import DAY
    from warmcast.forecast import Forecast
    from forecaster.baselines import Persistence

    class NoFinite(Persistence):
        name = "holt_winters"

        def predict(self, history, horizon=30, quantiles=(0.1, 0.5, 0.9)):
            f = super().predict(history, horizon, quantiles)
            return Forecast(f.origin, f.mean * np.nan, {q: v * np.nan for q, v in f.quantiles.items()}, self.name)

    frame = synth_frame(2, seed=2)
    res = run_backtest(frame, frame.index[DAY + 600], [Persistence(), NoFinite()], horizon=30, step=60,
                       progress=False)
    assert res.metrics["models"]["holt_winters"]["mae"] is None and res.metrics["winner"]["model"] == "persistence"
    paths = write_outputs(res, tmp_path)
    assert paths["plot"].stat().st_size > 10_000


@pytest.mark.timeout(1800)  # two trainings, the second beside a CPU burner: minutes on a loaded 2-core machine
def test_backtest_forecasts_are_byte_identical_under_cpu_load(tmp_path):
    """Same data, seed and configuration: the same forecasts.csv, also with a process burning CPU
    beside the second run (no wall-clock stop inside training; fixed threads; deterministic kernels)."""
    import subprocess
    import sys

    frame = synth_frame(2.2, seed=13)
    _backtest(tmp_path, frame, tmp_path / "quiet", models="lstm")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    try:
        _backtest(tmp_path, frame, tmp_path / "loaded", models="lstm")
    finally:
        for b in burners:
            b.kill()
            b.wait()
    a = (tmp_path / "quiet" / "forecasts.csv").read_bytes()
    assert len(a) > 1000 and a == (tmp_path / "loaded" / "forecasts.csv").read_bytes()
