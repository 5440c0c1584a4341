"""``warmcast backtest fleet`` from the command line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from wu_helpers import synthetic_minutes
from warmup import cli as wcli


def app() -> typer.Typer:
    root = typer.Typer()
    bt = typer.Typer()
    root.add_typer(bt, name="backtest")
    wcli.register(root, bt)
    return root


def test_fleet_command_writes_everything(tmp_path: Path) -> None:
    log = tmp_path / "load.csv"
    s = synthetic_minutes(days=3, mean=900.0, seed=4)
    s.rename("requests").to_frame().reset_index().assign(
        time=lambda d: d["time"].dt.strftime("%Y-%m-%d %H:%M:%S")).to_csv(log, index=False)
    out = tmp_path / "out"
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--capacity-rpm", "300",
                                     "--cold-start-min", "15", "--test-start", "2024-01-03", "--out", str(out),
                                     "--forecaster", "sim_seasonal_profile", "--decisions"])
    assert res.exit_code == 0, res.output
    for p in ("static", "reactive", "queue", "predictive", "oracle"):
        assert (out / f"plan_{p}.csv").exists()
    assert (out / "fleet.png").exists() and (out / "decisions_predictive.csv").exists()
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["policies"]) == {"static", "reactive", "queue", "predictive", "oracle"}
    assert "x oracle" in res.output and "predictive" in res.output


def test_fleet_command_errors_name_the_problem(tmp_path: Path) -> None:
    # Through the real entry point: a WarmcastError prints one line and exits 2.
    log = tmp_path / "load.csv"
    synthetic_minutes(days=2, seed=5).to_frame().reset_index().to_csv(log, index=False)
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "backtest", "fleet", "--log", str(log),
                        "--capacity-rpm", "300", "--test-start", "2031-01-01", "--out", str(tmp_path / "o"),
                        "--policies", "static,oracle"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "--test-start" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "backtest", "fleet", "--log", str(tmp_path / "nope.csv"),
                        "--capacity-rpm", "300", "--test-start", "2024-01-02", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_fleet_command_with_a_deployment(tmp_path: Path) -> None:
    log = tmp_path / "load.csv"
    synthetic_minutes(days=3, mean=900.0, seed=7).to_frame().reset_index().to_csv(log, index=False)
    dep = tmp_path / "deployments.yaml"
    dep.write_text(
        "deployments:\n"
        "  - name: chat\n    min_replicas: 1\n    max_replicas: 30\n    cold_start_min: 10\n"
        "    profiles:\n      day: {capacity_rpm: 300}\n      night: {capacity_rpm: 200}\n"
        "    schedule:\n      timezone: Europe/Berlin\n"
        "      windows: [{profile: night, start: '22:00', end: '07:00'}]\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--deployment", str(dep),
                                     "--test-start", "2024-01-03", "--out", str(out), "--no-plot",
                                     "--policies", "predictive,oracle", "--forecaster", "sim_seasonal_profile"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["meta"]["capacity_rpm"] == 300 and rep["meta"]["cold_start_min"] == 10
    assert rep["policies"]["predictive"]["profile_switches"] >= 1
