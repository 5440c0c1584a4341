"""Every command that reads a log takes the same flags for it (one shared set, warmcast.cli.log_options)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import warmcast.cli.forecast as fcli
import warmcast.cli.backtest as wcli
from warmcast.cli import foundation as commands
from warmcast.generate import generate_minute_frame

LOG_FLAGS = {"--format", "--tz", "--start", "--time-col", "--input-col", "--output-col", "--count-col", "--time-unit"}


def _app() -> typer.Typer:
    app, backtest = typer.Typer(), typer.Typer()
    app.add_typer(backtest, name="backtest")
    for module in (commands, fcli, wcli):
        module.register(app, backtest)
    return app


def _flags(app: typer.Typer, *path: str) -> dict[str, str]:
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {decl: p.help for p in cmd.params for decl in p.opts if decl.startswith("--")}


def test_ingest_and_both_backtests_take_the_same_log_flags():
    app = _app()
    seen = [_flags(app, "ingest"), _flags(app, "backtest", "forecast"), _flags(app, "backtest", "fleet")]
    for flags in seen:
        assert LOG_FLAGS <= set(flags), sorted(LOG_FLAGS - set(flags))
    for flag in LOG_FLAGS:
        assert len({flags[flag] for flags in seen}) == 1, flag  # same help: one declaration


@pytest.fixture
def custom_count_log(tmp_path: Path) -> tuple[Path, float]:
    """A 3-day count series whose columns no preset knows: epoch seconds in 'stamp', counts in 'hits'.
    Also returns the requests of its last day (the backtests' test part)."""
    frame = generate_minute_frame(days=3, mean_rpm=120, seed=2)
    log = tmp_path / "custom.csv"
    out = frame[["requests"]].rename(columns={"requests": "hits"})
    out.insert(0, "stamp", frame.index.as_unit("ns").asi8 // 1_000_000_000)
    out.to_csv(log, index=False)
    return log, float(frame.loc["2024-01-03":, "requests"].sum())


def test_fleet_backtest_reads_custom_columns(tmp_path, custom_count_log):
    log, last_day = custom_count_log
    flags = ["--format", "counts", "--time-col", "stamp", "--count-col", "hits", "--time-unit", "s"]
    r = CliRunner().invoke(_app(), ["backtest", "fleet", "--log", str(log), "--capacity-rpm", "60",
                                    "--test-start", "2024-01-03", "--out", str(tmp_path / "fleet"),
                                    "--forecaster", "sim_seasonal_profile", "--no-plot", *flags])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "fleet" / "report.json").read_text())
    assert report["meta"]["requests"] == round(last_day) and report["meta"]["resolution_s"] == 60


def test_forecast_backtest_reads_custom_columns(tmp_path, custom_count_log):
    log, _ = custom_count_log
    flags = ["--format", "counts", "--time-col", "stamp", "--count-col", "hits", "--time-unit", "s"]
    r = CliRunner().invoke(_app(), ["backtest", "forecast", "--log", str(log), "--test-start", "2024-01-03 00:00",
                                    "--out", str(tmp_path / "bt"), "--models", "persistence,seasonal_naive_day",
                                    *flags])
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "bt" / "metrics.json").read_text())
    assert set(metrics["models"]) == {"persistence", "seasonal_naive_day"}


def test_a_wrong_format_names_the_flag_and_the_choices(custom_count_log):
    log, _ = custom_count_log
    r = CliRunner().invoke(_app(), ["backtest", "fleet", "--log", str(log), "--capacity-rpm", "60",
                                    "--test-start", "2024-01-03", "--out", "x", "--format", "csvish"])
    assert r.exit_code != 0 and "--format must be one of auto, azure" in str(r.exception)
