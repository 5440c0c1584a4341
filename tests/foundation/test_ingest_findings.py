"""Issue 10's ingest and store findings, each reproduced: no input deletes history, pins a core
or ends in a traceback; partial minutes never reach a forecast; names are whole names."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from warmcast.config.deployments import check_deployment_name, parse_deployments
from warmcast.errors import InputError
from warmcast.generate import generate_minute_frame
from warmcast.ingest import aggregate_file
from warmcast.ingest.accumulate import MinuteAccumulator
from warmcast.ingest.window import TimeWindowError
from warmcast.store import LoadStore

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _write(tmp_path, name, text):
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


@pytest.fixture
def held(redis_client, key_prefix):
    """A deployment holding three days, with the default 90-day retention."""
    store = LoadStore(redis_client, key_prefix, retention_days=90)
    store.upsert_frame("d", generate_minute_frame(days=3, start="2024-03-01", mean_rpm=20))
    return store


def test_finding1_row_dated_2200_does_not_delete_history(held, snap, tmp_path):
    before = snap()
    log = _write(tmp_path, "log.csv", AZURE + "2024-03-03 12:00:01,5,5\n2200-01-01 00:00:00,5,5\n")
    with pytest.raises(InputError, match=r"log\.csv:3: column 'TIMESTAMP': later than now \+ 1 day"):
        aggregate_file([log], window=held.window("d"))
    frame, report = aggregate_file([log], window=held.window("d"), on_error="skip")
    assert report.skipped == 1 and any("later than now + 1 day" in p for p in report.problems)
    held.upsert_frame("d", frame)  # the refused row is not there: nothing for retention to count from
    with pytest.raises(TimeWindowError, match="2200-01-01 00:00: later than now"):
        held.upsert_frame("d", pd.DataFrame({"requests": [1.0]}, index=pd.DatetimeIndex(["2200-01-01"], name="time")))
    assert len(held.days("d")) == 3 and snap().keys() == before.keys()
    assert held.frame("d")["requests"].count() == 3 * 1440


def test_finding1_rows_older_than_retention_before_the_newest_are_refused(redis_client, key_prefix, tmp_path):
    store = LoadStore(redis_client, key_prefix, retention_days=2)
    store.upsert_frame("d", generate_minute_frame(days=1, start="2024-03-10", mean_rpm=20))
    log = _write(tmp_path, "old.csv", AZURE + "2024-03-10 00:00:01,5,5\n\n2024-03-01 00:00:01,5,5\n"
                                              "2024-03-10 00:01:01,5,5\n")
    with pytest.raises(InputError, match=r"old\.csv:4: more than retention_days=2 days before the newest"):
        aggregate_file([log], window=store.window("d"))
    frame, report = aggregate_file([log], window=store.window("d"), on_error="skip")
    assert report.skipped == 1 and frame.index[0] == pd.Timestamp("2024-03-10")
    with pytest.raises(TimeWindowError, match="2024-03-01 00:00: more than retention_days=2"):
        store.upsert_frame("d", pd.DataFrame({"requests": [1.0]}, index=pd.DatetimeIndex(["2024-03-01"], name="time")))


def test_finding1_retention_does_not_count_from_a_day_stored_before_the_bound(held, redis_client, key_prefix):
    """A 2200 day written before writes were bounded is not where retention counts back from."""
    day = int(pd.Timestamp("2200-01-01").value // 86_400_000_000_000)
    redis_client.zadd(f"{key_prefix}:load:d:days", {str(day): day})
    redis_client.hset(f"{key_prefix}:load:d:requests:22000101", mapping={"0": 1})
    held.upsert_frame("d", generate_minute_frame(days=1, start="2024-03-04", mean_rpm=20))
    assert held.frame("d", end="2024-03-05")["requests"].count() == 4 * 1440


def test_finding4_two_rows_a_year_apart_do_not_fill_the_year(tmp_path):
    acc = MinuteAccumulator()
    minutes = np.array([0, 525_600]) + 28_401_120  # 2024-01-01 and a year later
    acc.add(minutes, np.ones(2), None, None, with_hist=True)
    assert acc.fill_request_span() == 1 and len(acc.days) == 2  # one block per day with rows
    log = _write(tmp_path, "two.csv", AZURE + "2024-01-01 00:00:01,5,5\n2024-12-31 00:00:01,5,5\n")
    frame, report = aggregate_file([log])
    assert len(frame) == 1 and report.long_gaps == 1  # the second row's minute is the log's partial last
    assert "silences over a day" in report.summary()


def test_finding4_openai_log_created_minus_120_fails_at_its_line(tmp_path):
    recs = [{"created": -120, "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
            {"created": 1_700_000_000, "usage": {"prompt_tokens": 5, "completion_tokens": 1}}]
    log = _write(tmp_path, "access.jsonl", "\n".join(json.dumps(r) for r in recs) + "\n")
    with pytest.raises(InputError, match=r"access\.jsonl:1: column 'created': before 1970-01-01"):
        aggregate_file([log])
    frame, report = aggregate_file([log], on_error="skip")
    assert report.skipped == 1 and report.rows == 2


def _truncated_parquet(tmp_path):
    p = tmp_path / "cut.parquet"
    pd.DataFrame({"timestamp": pd.date_range("2024-01-01", periods=500, freq="s"), "input_tokens": 5,
                  "output_tokens": 1}).to_parquet(p)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return p


BAD_INPUTS = {
    "truncated_parquet": (_truncated_parquet, "auto", r"cut\.parquet: not a readable Parquet file"),
    "csv_named_parquet": (lambda t: _write(t, "x.parquet", AZURE + "2024-01-01,1,1\n"), "azure",
                          r"x\.parquet: not a readable Parquet file"),
    "year_9999": (lambda t: _write(t, "far.csv", AZURE + "2024-01-01 00:00:01,1,1\n9999-12-31 00:00:00,1,1\n"),
                  "auto", r"far\.csv:3: column 'TIMESTAMP': later than now \+ 1 day"),
    "seconds_1e20": (lambda t: _write(t, "s.csv", "ts,a,b\n1e20,1,1\n"), "mooncake_s",
                     r"s\.csv:2: column 'ts': later than now \+ 1 day"),
    "jsonl_list_line": (lambda t: _write(t, "l.jsonl", '{"timestamp": 1, "input_length": 1, "output_length": 1}\n'
                                         '[1, 2]\n'), "mooncake", r"l\.jsonl:2: .*not a JSON object"),
    "jsonl_not_utf8": (lambda t: _write(t, "u.jsonl", b'{"timestamp": 1, "input_length": 1, "output_length": 1}\n'
                                        b'{"timestamp": 2, "input_length": "\xff", "output_length": 1}\n'),
                       "mooncake", r"u\.jsonl:2: .*not UTF-8"),
    "header_over_field_limit": (lambda t: _write(t, "h.csv", AZURE.strip() + "," + "x" * 200_000 + "\n1,1,1,1\n"),
                                "auto", r"h\.csv:1: header is not readable CSV"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_finding8_bad_files_are_errors_naming_the_place(tmp_path, case):
    make, fmt, message = BAD_INPUTS[case]
    kw = dict(fmt="mooncake", time_col="ts", input_col="a", output_col="b", time_unit="s") \
        if fmt == "mooncake_s" else dict(fmt=fmt)
    with pytest.raises(InputError, match=message):
        aggregate_file([make(tmp_path)], **kw)


def test_finding8_bom_and_crlf_files_ingest_like_plain_ones(tmp_path):
    rows = "".join(f"2024-01-01 00:{m:02d}:{s:02d},{m + 1},1\n" for m in range(3) for s in (0, 30))
    plain = aggregate_file([_write(tmp_path, "plain.csv", AZURE + rows)])[0]
    crlf = (AZURE + rows).replace("\n", "\r\n").encode()
    bom = aggregate_file([_write(tmp_path, "bom.csv", b"\xef\xbb\xbf" + crlf)])[0]
    pd.testing.assert_frame_equal(plain, bom)
    jsonl = "".join(json.dumps({"timestamp": m * 30_000, "input_length": 1, "output_length": 1}) + "\r\n"
                    for m in range(6))
    frame, report = aggregate_file([_write(tmp_path, "m.jsonl", b"\xef\xbb\xbf" + jsonl.encode())], fmt="mooncake")
    assert report.rows == 6 and frame["requests"].sum() == 4


def test_round2_cr_only_line_ends_are_an_error_not_zero_rows(tmp_path):
    """Issue 31: a file with CR-only line ends was read as one line and stored as "0 rows"."""
    rows = "".join(f"2024-01-01 00:{m:02d}:{s:02d},{m + 1},1\n" for m in range(3) for s in (0, 30))
    cr = _write(tmp_path, "mac.csv", (AZURE + rows).replace("\n", "\r").encode())
    with pytest.raises(InputError, match=r"mac\.csv: lines end in CR alone"):
        aggregate_file([cr])


def test_finding8_line_numbers_count_blank_lines(tmp_path):
    csv = _write(tmp_path, "b.csv", AZURE + "\n2024-01-01 00:00:01,1,1\n\r\n\n2024-01-01 00:00:02,x,1\n")
    with pytest.raises(InputError, match=r"b\.csv:6: column 'ContextTokens': not a number"):
        aggregate_file([csv])
    jsonl = _write(tmp_path, "b.jsonl", '{"timestamp": 1, "input_length": 1, "output_length": 1}\n\n\n'
                                        '{"timestamp": 2, "input_length": "x", "output_length": 1}\n')
    with pytest.raises(InputError, match=r"b\.jsonl:4: column 'input_length': not a number"):
        aggregate_file([jsonl], fmt="mooncake")
    frame, report = aggregate_file([csv], on_error="skip")
    assert report.rows == 2 and report.skipped == 1 and "b.csv:6" in report.problems[0]


def test_finding9_blank_10s_interval_keeps_the_minute_missing(tmp_path):
    rows = [f"2024-01-01 00:00:{s:02d},{'' if s == 20 else 10}" for s in range(0, 60, 10)]
    rows += [f"2024-01-01 00:01:{s:02d},7" for s in range(0, 60, 10)]
    frame, report = aggregate_file([_write(tmp_path, "c.csv", "time,requests\n" + "\n".join(rows) + "\n")])
    assert report.blank_intervals == 1 and report.partial_minute is None
    assert frame["requests"].to_dict() == {pd.Timestamp("2024-01-01 00:01"): 42.0}


def test_finding10_names_with_a_trailing_newline_are_refused_everywhere(store, tmp_path):
    from forecaster.registry import ArtifactError, Registry

    with pytest.raises(InputError, match="deployment name 'chat\\\\n'"):
        check_deployment_name("chat\n")
    with pytest.raises(InputError, match="deployment name"):
        store.upsert_frame("chat\n", generate_minute_frame(days=1, mean_rpm=5))
    with pytest.raises(ArtifactError, match="bad deployment name"):
        Registry(tmp_path).versions("chat\n")
    with pytest.raises(InputError, match="deployment 'chat\\\\n': name: .*1-63 characters"):  # shown as its repr
        parse_deployments({"deployments": [{"name": "chat\n", "profiles": {"day": {"capacity_rpm": 10}}}]})
    assert check_deployment_name("chat") == "chat"


def test_finding10_default_cannot_be_trained_into_the_shipped_fallback(tmp_path):
    from forecaster.registry import RESERVED_NAMES, Registry

    reg = Registry(tmp_path)
    for name in RESERVED_NAMES:
        with pytest.raises(InputError, match=f"'{name}' is reserved for the shipped fallback model"):
            reg.save(name, object())
        with pytest.raises(InputError, match="reserved"):
            reg.set_champion(name, "v0001")
    assert list(tmp_path.iterdir()) == []


def test_finding12_partial_last_minute_is_not_stored_and_is_reported(tmp_path):
    times = pd.date_range("2024-01-01 12:00:00", "2024-01-01 12:34:20", freq="s")
    log = _write(tmp_path, "r.csv", AZURE + "".join(f"{t},5,1\n" for t in times))
    frame, report = aggregate_file([log])
    assert frame.index[-1] == pd.Timestamp("2024-01-01 12:33") and (frame["requests"] == 60).all()
    assert report.partial_minute == pd.Timestamp("2024-01-01 12:34") and report.partial_requests == 21
    assert "last minute 2024-01-01 12:34 not stored" in report.summary()
    counts = "time,requests\n" + "".join(f"2024-01-01 00:{m:02d}:{s:02d},3\n" for m in range(2) for s in (0, 10, 20, 30, 40, 50))
    whole, rep = aggregate_file([_write(tmp_path, "whole.csv", counts)])
    assert len(whole) == 2 and rep.partial_minute is None
    cut, rep = aggregate_file([_write(tmp_path, "cut.csv", counts + "2024-01-01 00:02:00,3\n")])
    assert len(cut) == 2 and rep.partial_minute == pd.Timestamp("2024-01-01 00:02")
