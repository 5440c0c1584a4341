"""Issue 32 item 5: the fleet backtest's test window on a coarse series.

The last row of a 5- or 10-minute count covers its whole bin (it used to count as one minute,
so a 10-minute series lost 9/10 of its last bin), and ``--test-end`` is exclusive: one day is
exactly 1,440 minutes holding exactly that day's requests."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from test_fleet_cli import app
from warmup.sim.backtest import make_split
from warmup.sim.data import from_series


def coarse(width: int, days: int = 3) -> pd.Series:
    t = pd.date_range("2024-03-04", periods=days * 1440 // width, freq=f"{width}min", name="time")
    rng = np.random.default_rng(width)
    return pd.Series(rng.integers(5_000, 9_000, len(t)).astype(float), index=t, name="requests")


@pytest.mark.parametrize("width", [5, 10])
def test_the_last_bin_covers_its_whole_width(width: int) -> None:
    counts = coarse(width)
    log = from_series(counts, source="coarse")
    assert log.minutes == 3 * 1440
    assert log.minute.index[-1] == counts.index[-1] + pd.Timedelta(minutes=width - 1)
    np.testing.assert_allclose(log.minute.sum(), counts.sum())
    np.testing.assert_allclose(log.minute.iloc[-width:].to_numpy(), counts.iloc[-1] / width)
    split = make_split(log, pd.Timestamp("2024-03-06"), pd.Timestamp("2024-03-07"))
    assert split.minutes == 1440
    np.testing.assert_allclose(split.demand.sum(), counts["2024-03-06"].sum())


@pytest.mark.parametrize("width", [1, 10])
def test_an_exclusive_test_end_gives_one_day_of_minutes(tmp_path: Path, width: int) -> None:
    counts = coarse(width)
    log = tmp_path / "load.csv"
    counts.to_frame().reset_index().assign(time=lambda d: d["time"].dt.strftime("%Y-%m-%d %H:%M:%S")).to_csv(
        log, index=False)
    out = tmp_path / "out"
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--capacity-rpm", "300",
                                     "--test-start", "2024-03-06", "--test-end", "2024-03-07", "--out", str(out),
                                     "--no-plot", "--policies", "static,oracle", "--forecaster", "persistence"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "report.json").read_text())["meta"]
    assert meta["test_minutes"] == 1440 and "1440 test minutes" in res.output
    assert meta["test_end"] == "2024-03-07 00:00:00" and meta["test_last_minute"] == "2024-03-06 23:59:00"
    assert meta["requests"] == int(counts["2024-03-06"].sum())
    assert len(pd.read_csv(out / "plan_static.csv")) == 1440
