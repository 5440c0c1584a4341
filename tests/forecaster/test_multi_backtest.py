"""``warmcast backtest forecast --series-col``: every model on every series of a multi-series file,
the fleet model trained once before the test start (issue 43); a file without it works as before."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from forecaster.global_lstm import Panel
from forecaster.multi_backtest import run_multi_backtest
from warmcast.cli.series_file import load_panel

from fc_panel import long_frame, synth_panel
from test_forecast_cli import _app

PANEL = synth_panel(days=4, levels=(5.0, 40.0, 300.0, 12.0), groups=("a", "a", "b", "b"))
START = PANEL.index[3 * 144].strftime("%Y-%m-%d %H:%M")
MODELS = "lstm_global,persistence,seasonal_naive_day"


def _file(tmp_path, frame: pd.DataFrame):
    log = tmp_path / "clients.csv.gz"
    frame.to_csv(log, index=False, date_format="%Y-%m-%d %H:%M:%S")
    return log


def test_every_model_on_every_series(tmp_path):
    log, out = _file(tmp_path, long_frame(PANEL)), tmp_path / "bt"
    r = CliRunner().invoke(_app(), ["backtest", "forecast", "--log", str(log), "--series-col", "client",
                                    "--test-start", START, "--out", str(out), "--quick", "--models", MODELS])
    assert r.exit_code == 0, r.output
    assert "4 series (model/client)" in r.output and "median scaled MAE" in r.output
    f = pd.read_csv(out / "forecasts.csv")
    assert list(f.columns) == ["series", "origin", "target", "model", "p10", "p50", "p90", "p95", "p99"]
    assert set(f["series"]) == {"a/c0", "a/c1", "b/c2", "b/c3"} and set(f["model"]) == set(MODELS.split(","))
    assert (f["origin"] >= START).all() and (np.diff(f[["p10", "p50", "p90", "p95", "p99"]].to_numpy()) >= 0).all()
    one = f[(f["series"] == "b/c2") & (f["model"] == "persistence")]
    assert len(one) == len(f) / 12 and one["target"].iloc[2] > one["origin"].iloc[2]
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["models"]) == set(MODELS.split(",")) and set(m["per_series"]) == set(f["series"])
    assert m["per_series"]["a/c1"]["models"]["lstm_global"]["mae"] > 0
    assert m["models"]["lstm_global"]["median_scaled"]["pinball_p95"] is not None
    per = pd.read_csv(out / "per_series.csv")
    assert len(per) == 12 and per["scaled_mae"].notna().all()


def test_the_fleet_model_is_fitted_once_before_the_test_start():
    fits = []

    class Spy:
        def __init__(self, name):
            from forecaster.global_lstm import GlobalLSTM, tiny_fleet_config

            self.inner = GlobalLSTM(tiny_fleet_config(epochs=1))

        def fit(self, panel):
            fits.append(panel.index[-1])
            self.inner.fit(panel)
            return self

        def predict_panel(self, panel, origins, horizon):
            return self.inner.predict_panel(panel, origins, horizon)

    res = run_multi_backtest(PANEL, START, ["lstm_global"], horizon=3, step=10, global_factory=Spy)
    assert fits == [pd.Timestamp(START) - pd.Timedelta(minutes=10)]  # once, on the steps before the test start
    assert res.preds["lstm_global"].shape == (4, len(res.origins), 3, 5)


def test_bad_series_are_forecast_or_named(tmp_path):
    frame = long_frame(PANEL)
    frame = frame[~((frame["client"] == "c1") & (frame["time"] < PANEL.index[-144]))]  # only on the last day
    frame = pd.concat([frame, pd.DataFrame({"model": ["b"], "client": ["silent"], "time": [PANEL.index[5]],
                                            "requests": [0.0]})])  # a client with no requests at all
    log, out = _file(tmp_path, frame), tmp_path / "bt"
    r = CliRunner().invoke(_app(), ["backtest", "forecast", "--log", str(log), "--series-col", "client",
                                    "--test-start", START, "--out", str(out), "--quick", "--models", MODELS])
    assert r.exit_code == 0, r.output
    assert "2 series had no load before the test start" in r.output  # silent, and c1 before its day
    m = json.loads((out / "metrics.json").read_text())
    assert m["per_series"]["b/silent"]["models"]["lstm_global"]["mae"] is not None


def test_bad_files_are_refused_in_one_line(tmp_path):
    log = _file(tmp_path, long_frame(PANEL))
    cmd = [sys.executable, "-m", "warmcast.cli", "backtest", "forecast", "--log", str(log), "--test-start", START,
           "--out", str(tmp_path / "o"), "--quick"]
    for extra, said in ((["--series-col", "tenant"], "no column 'tenant'"),
                        (["--series-col", "client", "--models", "prophet"], "unknown model")):
        p = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr, p.stderr
    bad = long_frame(PANEL)
    bad.loc[7, "requests"] = -3
    read = None
    try:
        read = load_panel(_file(tmp_path, bad), ["client"])
    except Exception as err:  # noqa: BLE001 - the type and the message are the point
        assert type(err).__name__ == "InputError" and "line 9" in str(err) and "'requests'" in str(err)
    assert read is None


def test_a_one_series_fleet_and_a_file_read_back():
    one = PANEL.select(np.arange(4) == 1)
    res = run_multi_backtest(one, START, ["persistence"], horizon=3, step=30)
    assert res.preds["persistence"].shape[0] == 1 and np.isfinite(res.preds["persistence"]).all()
    back = Panel.from_long(long_frame(PANEL), "client", group="model")
    assert back.values.sum() == PANEL.values.sum() and back.step_min == 10


def test_a_deployment_whose_rows_stop_is_missing_after_them_not_zero():
    """ServeGen's file holds two of its four services on its first day only: after their last row
    their clients are missing (no load known), not 13 days of zeros; inside a service's span a
    client without a row had no requests."""
    frame = long_frame(PANEL)
    early = frame["time"] < PANEL.index[144]
    frame = frame[(frame["model"] == "a") | early]  # service b: rows on the first day only
    p = Panel.from_long(frame, "client", group="model")
    b = np.asarray(p.groups) == "b"
    last_b = frame.loc[frame["model"] == "b", "time"].max()
    after = p.index > last_b
    assert np.isnan(p.values[b][:, after]).all() and np.isfinite(p.values[b][:, ~after]).all()
    assert np.isfinite(p.values[~b]).all()
    totals = p.with_totals()
    assert np.isnan(totals.values[totals.row("b/total"), after]).all()
