"""The Redis load store: range reads, gaps, export/import, retention, atomic refusal."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from warmcast.errors import InputError, NotFoundError
from warmcast.generate import generate_minute_frame
from warmcast.store import LoadStore, read_export


def _frame(minutes=3000, start="2024-03-01"):
    return generate_minute_frame(days=3, start=start, mean_rpm=40).iloc[:minutes]


def test_range_query_returns_exact_minutes_with_gaps_as_nan(store):
    f = _frame()
    f.iloc[100:160] = np.nan  # an outage
    store.upsert_frame("d", f)
    got = store.frame("d", "2024-03-01 01:00", "2024-03-01 03:00")
    assert len(got) == 120 and got.index[0] == pd.Timestamp("2024-03-01 01:00")
    req = got["requests"]
    assert req.iloc[:40].notna().all() and req.iloc[40:100].isna().all() and req.iloc[100:].notna().all()
    whole = store.frame("d")
    pd.testing.assert_series_equal(whole["requests"], f["requests"].loc[whole.index[0]:], check_freq=False)


def test_unknown_deployment_and_bad_names(store):
    with pytest.raises(NotFoundError, match="ingest a log first"):
        store.frame("nothing-here")
    with pytest.raises(InputError, match="deployment name"):
        store.upsert_frame("../etc", _frame(10))


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_export_import_roundtrip(store, redis_client, key_prefix, tmp_path, suffix):
    f = _frame()
    store.upsert_frame("d", f)
    path = tmp_path / f"out{suffix}"
    assert store.export("d", path) == len(f)
    other = LoadStore(redis_client, key_prefix + "-b")
    try:
        other.upsert_frame("d", read_export(path))
        pd.testing.assert_frame_equal(other.frame("d"), store.frame("d"), check_freq=False)
    finally:
        other.delete("d")


def test_bad_import_file_changes_nothing(store, snap, tmp_path):
    store.upsert_frame("d", _frame(100))
    before = snap()
    bad = tmp_path / "bad.csv"
    bad.write_text("time,requests\n2024-03-01 00:00:00,5\n2024-03-01 00:01:00,oops\n")
    with pytest.raises(InputError, match=r"bad\.csv:3: column 'requests'"):
        store.upsert_frame("d", read_export(bad))
    neg = _frame(10).copy()
    neg.iloc[5, 0] = -1
    with pytest.raises(InputError, match="negative"):
        store.upsert_frame("d", neg)
    assert snap() == before


def test_retention_drops_whole_old_days(redis_client, key_prefix):
    store = LoadStore(redis_client, key_prefix, retention_days=2)
    frame = generate_minute_frame(days=5, mean_rpm=10)
    for day in range(5):  # one write per day: a single write reaching past retention is refused
        store.upsert_frame("d", frame.iloc[day * 1440:(day + 1) * 1440])
    days = store.days("d")
    assert len(days) == 2
    assert store.frame("d").index[0] == pd.Timestamp("2024-01-04")
