"""Issue 11, as a user runs it: on a 5-minute ``timestamp,value`` count series, ``summary``,
``train``, ``backtest forecast`` (every baseline, with its plot) and ``backtest fleet`` run and say
the resolution (``train`` used to crash in its report, the forecast backtest in its plot)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def _elb_csv(path: Path, days: int = 4) -> None:
    t = pd.date_range("2024-03-04", periods=days * 288, freq="5min")
    daily = 1 + 0.7 * np.sin(2 * np.pi * (t.hour * 60 + t.minute) / 1440)
    v = np.round(3000 * daily + np.random.default_rng(1).normal(0, 40, len(t)))
    pd.DataFrame({"timestamp": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": v}).to_csv(path, index=False)


def test_cli_on_a_five_minute_series_runs_and_says_the_resolution(tmp_path, redis_server_url, key_prefix):
    _elb_csv(tmp_path / "elb.csv")
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "WARMCAST_MODELS_DIR": str(tmp_path / "models"),
           "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "warmcast.cli", *args], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=900)
        assert r.returncode == 0, f"{args}: {r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr
        return r.stdout

    cols = ["--time-col", "timestamp", "--count-col", "value"]
    assert "1,152 bins of 5 min" in run("ingest", "elb.csv", "-d", "elb", *cols)
    assert "requests per 5 min" in run("summary", "-d", "elb")
    out = run("train", "-d", "elb", "--quick", "--val-hours", "6")
    assert "series resolution 5 min" in out and "saved challenger elb/" in out
    out = run("backtest", "forecast", "--log", "elb.csv", *cols, "--test-start", "2024-03-07 18:00",
              "--out", "bt", "--models", "persistence,seasonal_naive_day,holt_winters")  # plotting HW crashed
    assert "5-minute resolution" in out and "6 leads for 30 minutes" in out
    metrics = json.loads((tmp_path / "bt" / "metrics.json").read_text())
    assert metrics["resolution_min"] == 5 and metrics["horizon"] == 6
    assert (tmp_path / "bt" / "forecast.png").stat().st_size > 0
    out = run("backtest", "fleet", "--log", "elb.csv", *cols, "--capacity-rpm", "100", "--cold-start-min", "5",
              "--test-start", "2024-03-07 18:00", "--out", "fleet", "--forecaster", "seasonal_naive")
    assert "series resolution 5 min" in out
