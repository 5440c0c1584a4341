"""Ingestion rules: idempotency, atomicity, bad rows, time zones, chunking, formats."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from warmcast.errors import InputError
from warmcast.generate import WorkloadSpec, write_request_log
from warmcast.ingest import aggregate_file


def _csv(tmp_path, text, name="log.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_reingest_leaves_store_unchanged(store, snap, tmp_path):
    log = tmp_path / "g.csv"
    write_request_log(log, WorkloadSpec(days=1, mean_rpm=50))
    frame, _ = aggregate_file([log])
    store.upsert_frame("d", frame)
    before = snap()
    frame2, _ = aggregate_file([log])
    store.upsert_frame("d", frame2)
    after = snap()
    # the load is unchanged; each day's write counter moved by one (warmcast.history re-reads a day whose
    # counter moved: a second write is a write, whatever it wrote)
    rev = f"{store.prefix}:load:d:rev".encode()
    assert {d: int(v) for d, v in after.pop(rev).items()} == {d: int(v) + 1 for d, v in before.pop(rev).items()}
    # and each day's write log holds the second write too: the same minutes as the first
    logs = [k for k in after if b":load:d:log:" in k]
    assert logs and sorted(logs) == sorted(k for k in before if b":load:d:log:" in k)
    for k in logs:
        before.pop(k), after.pop(k)
        first, second = store.r.lrange(k, -2, -1)
        assert first == second and store.r.llen(k) == 2
    assert after == before and len(before) > 3


def test_bad_row_in_middle_fails_with_file_line_column_and_stores_nothing(store, snap, tmp_path):
    good = _csv(tmp_path, AZURE + "2024-01-01 00:00:01,10,5\n2024-01-01 00:01:01,20,5\n", "good.csv")
    store.upsert_frame("d", aggregate_file([good])[0])
    before = snap()
    rows = [f"2024-01-01 00:0{i}:30,{100 + i},7" for i in range(8)]
    rows[4] = "2024-01-01 00:04:30,12x,7"
    bad = _csv(tmp_path, AZURE + "\n".join(rows) + "\n", "bad.csv")
    with pytest.raises(InputError) as err:
        store.upsert_frame("d", aggregate_file([bad], on_error="fail")[0])
    msg = str(err.value)
    assert f"{bad}:6" in msg and "ContextTokens" in msg and "not a number" in msg
    assert snap() == before


def test_skip_counts_bad_rows_and_keeps_the_rest(tmp_path):
    rows = ["2024-01-01 00:00:01,10,5", "2024-01-01 00:00:02,-3,5", "not-a-time,1,1",
            "2024-01-01 00:00:03,10,99999999999", "2024-01-01 00:00:04,,5", "2024-01-01 00:00:05,10,5",
            "2024-01-01 00:01:00,1,1"]  # the log's last minute is partial: not stored
    frame, report = aggregate_file([_csv(tmp_path, AZURE + "\n".join(rows) + "\n")], on_error="skip")
    assert report.skipped == 4
    assert frame["requests"].sum() == 2
    assert any("negative" in p for p in report.problems) and any("absurd" in p for p in report.problems)
    assert any("not a timestamp" in p for p in report.problems) and any("empty" in p for p in report.problems)


def test_out_of_order_rows_and_offsets_are_stored_in_utc(tmp_path):
    rows = ["2024-01-01T01:00:30+01:00,10,1", "2024-01-01 00:02:00,10,1", "2024-01-01 00:00:10,10,1",
            "2024-01-01 00:03:00,10,1"]
    frame, report = aggregate_file([_csv(tmp_path, AZURE + "\n".join(rows) + "\n")])
    assert report.out_of_order == 1
    assert frame["requests"].to_dict() == {pd.Timestamp("2024-01-01 00:00"): 2.0,
                                           pd.Timestamp("2024-01-01 00:01"): 0.0,
                                           pd.Timestamp("2024-01-01 00:02"): 1.0}


def test_naive_times_in_a_named_zone_become_utc(tmp_path):
    p = _csv(tmp_path, "time,requests\n2024-07-01 09:00:00,5\n2024-07-01 09:01:00,6\n")
    frame, _ = aggregate_file([p], tz="America/New_York")
    assert list(frame.index) == [pd.Timestamp("2024-07-01 13:00"), pd.Timestamp("2024-07-01 13:01")]


def test_duplicate_intervals_are_reported_and_summed(tmp_path):
    p = _csv(tmp_path, "time,requests\n2024-01-01 00:00:00,5\n2024-01-01 00:00:00,6\n2024-01-01 00:00:10,1\n"
                       "2024-01-01 00:00:50,0\n")
    frame, report = aggregate_file([p])
    assert report.duplicate_times == 1 and frame["requests"].iloc[0] == 12


def test_small_chunks_give_the_same_minutes_as_one_chunk(tmp_path):
    log = tmp_path / "g.csv"
    write_request_log(log, WorkloadSpec(days=1, mean_rpm=30, seed=3))
    one, _ = aggregate_file([log])
    many, _ = aggregate_file([log], chunk_rows=997)  # boundaries fall inside minutes
    pd.testing.assert_frame_equal(one, many)


def test_jsonl_bad_line_is_named(tmp_path):
    lines = [json.dumps({"timestamp": i * 1000, "input_length": 5, "output_length": 1}) for i in range(5)]
    lines[3] = '{"timestamp": 3000, "input_length": 5'
    p = _csv(tmp_path, "\n".join(lines) + "\n", "m.jsonl")
    with pytest.raises(InputError, match=r"m\.jsonl:4: .*not valid JSON"):
        aggregate_file([p], fmt="mooncake")


def test_openai_access_log_and_parquet(tmp_path):
    recs = [{"id": f"c{i}", "created": 1_700_000_000 + i * 20, "usage": {"prompt_tokens": 100 + i,
                                                                        "completion_tokens": 10}} for i in range(6)]
    p = _csv(tmp_path, "\n".join(json.dumps(r) for r in recs) + "\n", "access.jsonl")
    frame, report = aggregate_file([p])
    # created % 60 == 20: minutes hold requests 0-1, 2-4 and 5; the last, partial one is not stored
    assert report.format == "openai" and frame["requests"].sum() == 5 and report.partial_requests == 1
    assert frame["input_tokens"].sum() == sum(100 + i for i in range(5))
    pq = tmp_path / "g.parquet"
    write_request_log(pq, WorkloadSpec(days=1, mean_rpm=20))
    csv = tmp_path / "g.csv"
    write_request_log(csv, WorkloadSpec(days=1, mean_rpm=20))
    pd.testing.assert_frame_equal(aggregate_file([pq])[0], aggregate_file([csv])[0])


def test_column_mapping_for_a_custom_log(tmp_path):
    p = _csv(tmp_path, "ts_ms,prompt,gen\n1000,7,3\n61000,8,2\n121000,1,1\n")
    frame, _ = aggregate_file([p], fmt="warmcast", time_col="ts_ms", time_unit="ms",
                             input_col="prompt", output_col="gen")
    assert frame["input_tokens"].tolist() == [7.0, 8.0]


def test_unknown_columns_give_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="cannot tell the log format"):
        aggregate_file([_csv(tmp_path, "a,b\n1,2\n")])
    with pytest.raises(InputError, match=r"missing column\(s\) \['ContextTokens'"):
        aggregate_file([_csv(tmp_path, "TIMESTAMP,x\n2024-01-01,1\n")], fmt="azure")


def test_round2_the_same_intervals_in_two_files_of_one_call_are_counted_and_said(tmp_path):
    """Issue 31: the same times in two files of one call were summed silently."""
    a = _csv(tmp_path, "time,requests\n2024-01-01 00:00:00,5\n2024-01-01 00:01:00,6\n")
    b = tmp_path / "b.csv"
    b.write_text("time,requests\n2024-01-01 00:01:00,6\n2024-01-01 00:02:00,7\n")
    frame, report = aggregate_file([a, b])
    assert report.duplicate_times == 1, report
    assert "1 intervals repeated, in a file or across the files of this call" in report.summary(), report.summary()


def test_round2_a_count_series_report_names_no_tokens(tmp_path):
    """Issue 32: count-series ingest printed "0 input tokens"."""
    p = _csv(tmp_path, "time,requests\n2024-01-01 00:00:00,5\n2024-01-01 00:01:00,6\n")
    _, report = aggregate_file([p])
    assert report.format == "counts" and "11 requests" in report.summary() and "tokens" not in report.summary()
