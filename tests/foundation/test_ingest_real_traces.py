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
    got = stored["requests"].dropna()
    assert len(got) == len(expected) == report.minutes
    np.testing.assert_array_equal(got.index.values, expected.index.values.astype("datetime64[ns]"))
    np.testing.assert_array_equal(got.to_numpy(), expected.to_numpy(float))
    assert got.sum() == 27_303_999


def test_azure2023_requests_and_exact_token_sums(store, shared_data):
    path = shared_data / "azure2023_conv_requests.csv"
    stored, report = _ingest(store, path, fmt="azure")
    raw = pd.read_csv(path)
    assert stored["requests"].sum() == 19_366 == report.requests
    assert stored["input_tokens"].sum() == raw["ContextTokens"].sum()
    assert stored["output_tokens"].sum() == raw["GeneratedTokens"].sum()
    # ctx_mean is input tokens per request; p95 comes from a histogram within ~5%.
    minute = pd.to_datetime(raw["TIMESTAMP"]).dt.floor("min")
    busiest = minute.value_counts().idxmax()
    exact_p95 = raw.loc[minute == busiest, "ContextTokens"].quantile(0.95)
    assert abs(stored.loc[busiest, "ctx_p95"] / exact_p95 - 1) < 0.06


def test_mooncake_requests_and_exact_token_sums(store, shared_data):
    path = shared_data / "mooncake_conversation_requests.jsonl"
    stored, _ = _ingest(store, path, fmt="mooncake", start="2024-06-01")
    raw = pd.read_json(path, lines=True)
    assert stored["requests"].sum() == len(raw) == 12_031
    assert stored["input_tokens"].sum() == raw["input_length"].sum()
    assert stored["output_tokens"].sum() == raw["output_length"].sum()
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
