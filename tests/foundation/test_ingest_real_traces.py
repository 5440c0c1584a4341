"""Ingestion of the real public traces gives exactly the file's own sums (real Redis)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from warmcast.ingest import aggregate_file


def _ingest(store, path, fmt="auto", **kw):
    frame, report = aggregate_file([path], fmt=fmt, **kw)
    store.upsert_frame("trace", frame)
    return store.frame("trace"), report


def test_azure2024_counts_per_minute_totals_equal_file_sums(store, shared_data):
    path = shared_data / "azure2024_conversation_10s.csv"
    stored, report = _ingest(store, path, fmt="counts")
    raw = pd.read_csv(path, parse_dates=["time"])
    expected = raw.groupby(raw["time"].dt.floor("min"))["requests"].sum()
    # the file ends with one 10 s interval of 2024-05-19 00:00: a partial minute, not stored
    assert report.partial_minute == expected.index[-1] and report.partial_requests == expected.iloc[-1]
    expected = expected.iloc[:-1]
    got = stored["requests"].dropna()
    assert len(got) == len(expected) == report.minutes
    np.testing.assert_array_equal(got.index.values, expected.index.values.astype("datetime64[ns]"))
    np.testing.assert_array_equal(got.to_numpy(), expected.to_numpy(float))
    assert got.sum() + report.partial_requests == 27_303_999


def test_azure2023_requests_and_exact_token_sums(store, shared_data):
    path = shared_data / "azure2023_conv_requests.csv"
    stored, report = _ingest(store, path, fmt="azure")
    raw = pd.read_csv(path)
    minute = pd.to_datetime(raw["TIMESTAMP"]).dt.floor("min")
    whole = raw[minute < report.partial_minute]  # the log's last, partial minute is not stored
    assert stored["requests"].sum() == len(whole) == report.requests == 19_366 - report.partial_requests
    assert stored["input_tokens"].sum() == whole["ContextTokens"].sum()
    assert stored["output_tokens"].sum() == whole["GeneratedTokens"].sum()
    # ctx_mean is input tokens per request; p95 comes from a histogram within ~5%.
    busiest = minute.value_counts().idxmax()
    exact_p95 = raw.loc[minute == busiest, "ContextTokens"].quantile(0.95)
    assert abs(stored.loc[busiest, "ctx_p95"] / exact_p95 - 1) < 0.06


def test_mooncake_requests_and_exact_token_sums(store, shared_data):
    path = shared_data / "mooncake_conversation_requests.jsonl"
    stored, report = _ingest(store, path, fmt="mooncake", start="2024-06-01")
    raw = pd.read_json(path, lines=True)
    whole = raw[raw["timestamp"] // 60_000 < raw["timestamp"].max() // 60_000]  # without the partial last minute
    assert stored["requests"].sum() == len(whole) == 12_031 - report.partial_requests
    assert stored["input_tokens"].sum() == whole["input_length"].sum()
    assert stored["output_tokens"].sum() == whole["output_length"].sum()
    assert stored.index[0] == pd.Timestamp("2024-06-01")  # ms offsets placed after --start


def test_nasa_outage_stays_missing_not_zero(store, shared_data):
    stored, report = _ingest(store, shared_data / "nasa_http_1995_per_minute.csv")
    raw = pd.read_csv(shared_data / "nasa_http_1995_per_minute.csv")
    assert report.blank_intervals == raw["requests"].isna().sum() > 0
    assert stored["requests"].isna().sum() == raw["requests"].isna().sum()
    assert stored["requests"].sum() == raw["requests"].sum()


def test_auto_detects_every_trace(shared_data):
    from warmcast.ingest.formats import detect_format

    assert detect_format(shared_data / "azure2023_code_requests.csv") == "azure"
    assert detect_format(shared_data / "mooncake_conversation_requests.jsonl") == "mooncake"
    assert detect_format(shared_data / "azure2024_conversation_per_minute.csv") == "counts"
