"""Series keep their resolution (issue 11): a count series at 5 or 10 minutes is stored, shown and
refused in its own bins, never as minutes that were each observed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from warmcast.errors import InputError
from warmcast.ingest import aggregate_file
from warmcast.summary import summary_text


def five_minute_csv(path, days=3, start="2024-03-04", value_col="value"):
    """An AWS-ELB-like request-count export: ``timestamp,value`` every 5 minutes."""
    t = pd.date_range(start, periods=days * 288, freq="5min")
    daily = 1 + 0.8 * np.sin(2 * np.pi * (t.hour * 60 + t.minute) / 1440)
    v = np.round(500 * daily + np.random.default_rng(0).normal(0, 10, len(t)))
    pd.DataFrame({"timestamp": t.strftime("%Y-%m-%dT%H:%M:%SZ"), value_col: v}).to_csv(path, index=False)
    return t, v


def test_ingest_detects_a_five_minute_series_and_stores_its_bins(store, tmp_path):
    t, v = five_minute_csv(tmp_path / "elb.csv")
    frame, report = aggregate_file([tmp_path / "elb.csv"], time_col="timestamp", count_col="value", fmt="counts")
    assert report.resolution_min == 5 and report.minutes == len(t)
    assert "stored 864 bins of 5 min" in report.summary()
    store.upsert_frame("elb", frame, resolution_min=report.resolution_min)
    got = store.frame("elb")
    assert store.resolution("elb") == 5
    assert len(got) == len(t) and got["requests"].notna().all()  # not 4 missing minutes per bin
    assert (got.index[1] - got.index[0]) == pd.Timedelta(minutes=5)
    np.testing.assert_allclose(got["requests"].to_numpy(), v)


def test_a_later_ingest_at_another_resolution_is_refused_and_loses_nothing(store, tmp_path):
    five_minute_csv(tmp_path / "elb.csv")
    frame, report = aggregate_file([tmp_path / "elb.csv"], time_col="timestamp", count_col="value")
    store.upsert_frame("d", frame, resolution_min=report.resolution_min)
    before = store.frame("d")
    minutes = pd.DataFrame({"requests": np.ones(120)},
                           index=pd.date_range("2024-03-07", periods=120, freq="min", name="time"))
    with pytest.raises(InputError, match=r"'d' stores 5-minute bins.*1-minute.*nothing was stored"):
        store.upsert_frame("d", minutes)
    pd.testing.assert_frame_equal(store.frame("d"), before)
    store.upsert_frame("m", minutes)  # a minute deployment refuses 5-minute bins the same way
    with pytest.raises(InputError, match="'m' stores 1-minute bins"):
        store.upsert_frame("m", frame, resolution_min=5)
    assert store.resolution("m") == 1 and len(store.frame("m")) == 120


def test_summary_says_per_bin_and_labels_the_rate(store, tmp_path):
    five_minute_csv(tmp_path / "elb.csv")
    frame, report = aggregate_file([tmp_path / "elb.csv"], time_col="timestamp", count_col="value")
    store.upsert_frame("elb", frame, resolution_min=5)
    text = summary_text(store.frame("elb"), "elb", 24 * 60)
    assert "864 bins of 5 min stored" in text and "(0 missing)" in text
    assert "requests per 5 min: mean" in text and "requests/min (rate, from 5-min bins)" in text
    assert "requests/min: mean" not in text


def test_the_unfinished_last_bin_is_not_stored(tmp_path):
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    t = pd.date_range(now.floor("5min") - pd.Timedelta(hours=2), now.floor("5min"), freq="5min")
    pd.DataFrame({"time": t, "requests": 7.0}).to_csv(tmp_path / "live.csv", index=False)
    frame, report = aggregate_file([tmp_path / "live.csv"])
    assert report.resolution_min == 5
    assert frame.index[-1] == t[-2]  # the bin that started at t[-1] has not ended yet
    assert "not stored: it has not ended" in report.summary()


def test_blank_intervals_count_for_the_grid(tmp_path):
    """A per-minute series with every other minute blank is still per minute (its rows alone lie on
    a 2-minute grid), and a series split over chunks keeps its 5-minute grid across them."""
    t = pd.date_range("2024-03-04", periods=240, freq="min")
    vals = np.where(np.arange(240) % 2, np.nan, 5.0)
    pd.DataFrame({"time": t, "requests": vals}).to_csv(tmp_path / "m.csv", index=False)
    _, report = aggregate_file([tmp_path / "m.csv"])
    assert report.resolution_min == 1 and report.blank_intervals == 120
    t5 = pd.date_range("2024-03-04", periods=40, freq="5min")
    pd.DataFrame({"time": t5.strftime("%Y-%m-%d %H:%M:%S"), "requests": 3.0}).to_json(
        tmp_path / "five.jsonl", orient="records", lines=True)
    _, report = aggregate_file([tmp_path / "five.jsonl"], chunk_rows=1)  # JSON lines: one row per chunk
    assert report.resolution_min == 5 and report.minutes == 40


def test_real_ten_minute_trace_keeps_its_bins(shared_data, store):
    frame, report = aggregate_file([shared_data / "servegen_mmid_10min.csv"])
    assert report.resolution_min == 10
    store.upsert_frame("sg", frame, resolution_min=10)
    got = store.frame("sg")
    assert len(got) == 2016 and got["requests"].isna().sum() == 0


def test_cli_ingest_and_summary_say_the_resolution(tmp_path, redis_server_url, key_prefix):
    five_minute_csv(tmp_path / "elb.csv")
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this checkout, wherever the venv points
    run = lambda args: subprocess.run([sys.executable, "-m", "warmcast.cli", *args], capture_output=True,  # noqa: E731
                                      text=True, env=env, cwd=tmp_path, timeout=120)
    r = run(["ingest", "elb.csv", "-d", "elb", "--time-col", "timestamp", "--count-col", "value"])
    assert r.returncode == 0, r.stderr
    assert "864 bins of 5 min" in r.stdout
    r = run(["summary", "-d", "elb"])
    assert r.returncode == 0, r.stderr
    assert "requests per 5 min" in r.stdout and "missing" in r.stdout and "(0 missing)" in r.stdout


@pytest.mark.parametrize("step", ["7min", "90s", "100min"])
def test_round2_a_count_series_at_an_interval_that_does_not_divide_a_day_is_refused(tmp_path, step):
    """Issue 31: a 7-minute series was stored per minute, each count 7x too high."""
    from warmcast.errors import InputError
    from warmcast.ingest import aggregate_file

    idx = pd.date_range("2024-01-01", periods=50, freq=step)
    path = tmp_path / f"odd-{step}.csv"
    pd.DataFrame({"time": idx.strftime("%Y-%m-%d %H:%M:%S"), "requests": 70}).to_csv(path, index=False)
    with pytest.raises(InputError, match="intervals: warmcast keeps a series per minute or in bins that divide a day"):
        aggregate_file([path], fmt="counts")
