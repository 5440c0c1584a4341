"""Issue 41 (1): a count series' interval is the step its stamps agree on, never the greatest common
divisor of every step, so one irregular stamp no longer turns a 5-minute series into minutes each
holding five minutes of requests."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from warmcast.errors import InputError
from warmcast.ingest import aggregate_file
from warmcast.summary import summary_text

BASE = pd.Timestamp("2024-03-04")


def series_csv(path, times: pd.DatetimeIndex | pd.Series, value: float | np.ndarray = 1000.0):
    pd.DataFrame({"time": pd.Series(times).dt.strftime("%Y-%m-%d %H:%M:%S").values,
                  "requests": value}).to_csv(path, index=False)
    return path


def regular(step: str, n: int) -> pd.Series:
    return pd.Series(pd.date_range(BASE, periods=n, freq=step))


def test_round3_item1_a_five_minute_series_with_one_late_stamp_keeps_its_bins(store, tmp_path):
    """Issue 41 (1): one stamp a minute late made the grid 1 minute: 576 "minutes" of 1,000 requests,
    summary mean 991.7/min where the true rate is about 200/min."""
    t = regular("5min", 576)
    t.iloc[100] += pd.Timedelta(minutes=1)  # line 102 of the file
    frame, report = aggregate_file([series_csv(tmp_path / "elb.csv", t)])
    assert report.resolution_min == 5 and report.shifted == 1
    assert frame.index[100] == BASE + pd.Timedelta(minutes=500)  # moved to the bin it is late for
    assert "1 stamps off the 5-minute grid moved to their nearest bin" in report.summary()
    assert "elb.csv:102 (2024-03-04 08:21:00 -> 08:20)" in report.summary()
    store.upsert_frame("elb", frame, resolution_min=report.resolution_min)
    text = summary_text(store.frame("elb"), "elb", 24 * 60)
    assert "requests per 5 min: mean 1,000.0" in text and "(0 missing)" in text
    assert "busiest hour 2024-03-04 00:00:00 (200 requests/min (rate, from 5-min bins))" in text


def test_round3_item1_a_seven_minute_series_with_one_six_minute_step_is_refused(tmp_path):
    """Issue 41 (1): the 6-minute step made the grid 1 minute, and the 7-minute counts were stored as
    minutes (224/min where the true rate is 32)."""
    t = regular("7min", 300)
    t.iloc[150:] -= pd.Timedelta(minutes=1)
    with pytest.raises(InputError, match="7-minute intervals: warmcast keeps a series per minute or in bins that "
                                         "divide a day"):
        aggregate_file([series_csv(tmp_path / "seven.csv", t, 224.0)])


def test_round3_item1_stamps_that_do_not_agree_with_the_interval_are_refused_naming_rows(tmp_path):
    t = regular("5min", 288)
    t.iloc[144:] += pd.Timedelta(minutes=2)  # half the series moved onto another grid
    with pytest.raises(InputError, match=r"144 of the 288 stamps of this 5-minute series lie off its grid, "
                                         r"more than the 2 .*: .*s\.csv:146 \(2024-03-04 12:02:00\)"
                                         r".*nothing was stored"):
        aggregate_file([series_csv(tmp_path / "s.csv", t)])
    t = regular("5min", 288)
    t.iloc[10] = t.iloc[9] + pd.Timedelta(minutes=1)  # 00:46: nearest bin 00:45 holds a value already
    with pytest.raises(InputError, match=r"s2\.csv:12 \(2024-03-04 00:46:00\): its nearest bin 00:45 holds"):
        aggregate_file([series_csv(tmp_path / "s2.csv", t)])


@pytest.mark.parametrize("step,res", [("1min", 1), ("5min", 5), ("10min", 10), ("10s", 1)])
def test_round3_item1_regular_series_with_gaps_ingest_as_before_and_say_the_gaps(tmp_path, step, res):
    t = regular(step, 1000)
    keep = np.r_[0:400, 430:1000]  # 30 stamps missing: a gap of whole intervals
    frame, report = aggregate_file([series_csv(tmp_path / "r.csv", t.iloc[keep], 6.0)])
    assert report.resolution_min == res and report.shifted == 0 and report.missing_intervals == 30
    assert "30 intervals missing between stamps (kept missing, not zero)" in report.summary()
    per_bin = 6.0 if res > 1 else 6.0 * pd.Timedelta(minutes=1) / pd.Timedelta(step)
    assert frame["requests"].eq(per_bin).all()  # no bin (minute) holds a part of its load
    if step == "10s":  # the gap starts and ends inside a minute: those two are kept missing, not stored low
        assert report.incomplete_minutes == 2 and len(frame) == 166 - 4 - 2  # 4 minutes with no stamp


def test_round3_item1_a_finer_interval_that_does_not_divide_a_minute_is_refused(tmp_path):
    """45 s bins fall one or two to a minute: per-minute sums would swing 2x with no change in load."""
    with pytest.raises(InputError, match="45-second intervals: .*divides a minute"):
        aggregate_file([series_csv(tmp_path / "s.csv", regular("45s", 200), 5.0)])


def test_round3_item1_replay_reads_the_late_stamp_into_its_bin_as_ingest_does(tmp_path):
    from warmup.sim import load_log

    t = regular("5min", 576)
    t.iloc[100] += pd.Timedelta(minutes=1)
    log = load_log(series_csv(tmp_path / "elb.csv", t))
    assert log.resolution_min == 5 and log.bins.notna().all() and log.bins.sum() == 576_000
