"""Issue 41 (reliability round three), ingest: rows ``ingest`` must refuse, refused with the file, the
real line and the column; nothing already stored is lost."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from warmcast.errors import InputError
from warmcast.ingest import aggregate_file

HEADER = "timestamp,input_tokens,output_tokens"


def request_rows(n: int, start: str = "2024-01-01", every_s: int = 20) -> list[str]:
    """``n`` requests ``every_s`` seconds apart from ``start``, as warmcast's own log format writes them."""
    t0 = pd.Timestamp(start)
    return [f"{t0 + pd.Timedelta(seconds=i * every_s):%Y-%m-%d %H:%M:%S},10,5" for i in range(n)]


def write_csv(path, rows: list[str]):
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_round3_item4c_a_fractional_token_count_is_refused_naming_file_line_column(tmp_path, kind):
    """Issue 41 (4c): ``input_tokens: 12.5`` was accepted as a token count."""
    rows = request_rows(10)
    rows[6] = rows[6].replace(",10,", ",12.5,")
    if kind == "csv":
        path = write_csv(tmp_path / "log.csv", rows)
        line = 8
    else:
        path = tmp_path / "log.jsonl"
        recs = [dict(zip(HEADER.split(","), r.split(","))) for r in rows]
        path.write_text("".join(json.dumps({**r, "input_tokens": float(r["input_tokens"]),
                                            "output_tokens": int(r["output_tokens"])}) + "\n" for r in recs))
        line = 7
    with pytest.raises(InputError, match=rf"log\.{kind}:{line}: column 'input_tokens': not a whole number"):
        aggregate_file([path], fmt="warmcast")
    frame, report = aggregate_file([path], fmt="warmcast", on_error="skip")
    assert report.skipped == 1 and "not a whole number" in report.problems[0]
    assert aggregate_file([write_csv(tmp_path / "whole.csv", [r.replace(",10,", ",10.0,") for r in rows[:6]])],
                          fmt="warmcast")[1].skipped == 0  # 10.0 is a whole number


@pytest.mark.parametrize("bad,why", [("2024-01-01 00:00:49,10", r"2 fields where the header has 3"),
                                     ("2024-01-01 00:00:49,10,5,7", r"4 fields where the header has 3")])
def test_round3_item4d_a_short_or_long_row_deep_in_a_file_is_named_by_its_own_line(tmp_path, bad, why):
    """Issue 41 (4d): the error said "after line 2" (the block's first line) for a row on line 300."""
    rows = request_rows(400)
    rows[298] = bad.replace("00:00:49", rows[298].split(",")[0][11:])  # line 300 of the file: the header is line 1
    with pytest.raises(InputError, match=rf"log\.csv:300: {why}"):
        aggregate_file([write_csv(tmp_path / "log.csv", rows)])


@pytest.mark.parametrize("kind", ["counts", "requests"])
def test_round3_item4a_replay_reads_a_log_through_ingests_validation(tmp_path, kind):
    """Issue 41 (4a): ``warmcast replay`` (``warmup.sim.load_log``) accepted a deep bad row that ingest refuses."""
    from warmup.sim import load_log

    if kind == "counts":
        t = pd.date_range("2024-01-01", periods=600, freq="min")
        rows = [f"{x:%Y-%m-%d %H:%M:%S},{5}" for x in t]
        rows[497] = rows[497].replace(",5", ",-5")  # line 499
        path = tmp_path / "log.csv"
        path.write_text("time,requests\n" + "\n".join(rows) + "\n")
        column = "requests"
    else:
        rows = request_rows(600)
        rows[497] = "2024-13-45 00:00:00,10,5"
        path = write_csv(tmp_path / "log.csv", rows)
        column = "timestamp"
    with pytest.raises(InputError) as ingest_err:
        aggregate_file([path])
    assert f"log.csv:499: column '{column}'" in str(ingest_err.value)
    with pytest.raises(InputError) as replay_err:
        load_log(path)
    where = str(ingest_err.value).split(". Nothing was stored")[0]  # replay has no --on-error to suggest
    assert str(replay_err.value).startswith(where), (str(replay_err.value), where)


def test_round3_item4g_an_overlong_bad_value_is_cut_in_the_error(tmp_path):
    """Issue 41 (4g): the error echoed the refused value whole (a cell may be a megabyte long)."""
    rows = request_rows(10)
    rows[4] = "x" * 5000 + ",10,5"
    with pytest.raises(InputError) as err:
        aggregate_file([write_csv(tmp_path / "log.csv", rows)])
    assert "log.csv:6: column 'timestamp': not a timestamp" in str(err.value) and len(str(err.value)) < 400
    assert "5,000 characters" in str(err.value)


def test_round3_item2_the_same_request_log_twice_in_one_call_is_refused_naming_both(tmp_path):
    """Issue 41 (2): a request log given twice in one call was counted twice without a word."""
    log = write_csv(tmp_path / "log.csv", request_rows(300))
    with pytest.raises(InputError, match=r"log\.csv and .*log\.csv are the same file.*pass each file once.*nothing was stored"):
        aggregate_file([log, tmp_path / "." / "log.csv"])
    copy = tmp_path / "copy.csv"
    copy.write_bytes(log.read_bytes())
    with pytest.raises(InputError, match=r"log\.csv and .*copy\.csv have the same content"):
        aggregate_file([log, copy])
    counts = tmp_path / "counts.csv"  # a count series too: one file twice is never meant
    counts.write_text("time,requests\n2024-01-01 00:00:00,5\n2024-01-01 00:01:00,6\n")
    with pytest.raises(InputError, match="are the same file"):
        aggregate_file([counts, counts])


def test_round3_item2_overlapping_parts_of_a_request_log_are_refused_naming_both(tmp_path):
    """Issue 41 (2): two parts whose times overlap were both counted."""
    rows = request_rows(300)  # 00:00:00 .. 01:39:40, one request every 20 s
    a = write_csv(tmp_path / "part1.csv", rows[:200])
    b = write_csv(tmp_path / "part2.csv", rows[150:])
    with pytest.raises(InputError, match=r"part1\.csv \(2024-01-01 00:00:00 .. 01:06:20\) and .*part2\.csv "
                                         r"\(2024-01-01 00:50:00 .. 01:39:40\) overlap.*counted twice"):
        aggregate_file([b, a])
    whole, _ = aggregate_file([write_csv(tmp_path / "all.csv", rows)])
    split, report = aggregate_file([write_csv(tmp_path / "p1.csv", rows[:200]),
                                    write_csv(tmp_path / "p2.csv", rows[200:])])  # parts that follow each other
    pd.testing.assert_frame_equal(split, whole)


def _ingest_cli(redis_server_url, key_prefix, deployment, *files):
    """`warmcast ingest FILES -d DEPLOYMENT` in this process, on the test's Redis and key prefix."""
    import typer
    from typer.testing import CliRunner

    from warmcast.cli import foundation

    app = typer.Typer()
    foundation.register(app, typer.Typer())
    env = {"WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix}
    res = CliRunner().invoke(app, ["ingest", *map(str, files), "-d", deployment], env=env)
    assert res.exit_code == 0, res.output
    return res.output


def test_round3_item4b_a_minute_split_over_two_parts_is_the_sum_of_both(tmp_path, store, redis_server_url, key_prefix):
    """Issue 41 (4b): a log split mid-minute, its parts ingested one call each: the later part's share
    of the minute (10 of 12 requests) was stored as the whole minute, or overwrote the whole one."""
    rows = request_rows(240, every_s=5)  # 12 requests a minute, 00:00 .. 00:19:55
    cut = 10 * 12 + 2  # part 1 ends with 2 of 00:10's 12 requests; part 2 holds the other 10
    part1 = write_csv(tmp_path / "part1.csv", rows[:cut])
    part2 = write_csv(tmp_path / "part2.csv", rows[cut:])
    whole, _ = aggregate_file([write_csv(tmp_path / "whole.csv", rows)])
    ten = pd.Timestamp("2024-01-01 00:10")
    _ingest_cli(redis_server_url, key_prefix, "d", part1)
    assert ten not in store.frame("d")["requests"].dropna().index  # partial: not stored, kept aside
    out = _ingest_cli(redis_server_url, key_prefix, "d", part2)
    assert "first minute 00:10 joined to the 2 requests the previous part ended with" in out, out
    pd.testing.assert_series_equal(store.frame("d")["requests"].dropna(), whole["requests"], check_freq=False)
    _ingest_cli(redis_server_url, key_prefix, "d", part2)  # the same part again: nothing changes
    assert store.frame("d").loc[ten, "requests"] == 12
    _ingest_cli(redis_server_url, key_prefix, "e", part1, part2)  # both parts in one call: 00:10 whole ...
    out = _ingest_cli(redis_server_url, key_prefix, "e", part2)   # ... and a later part alone does not cut it
    assert store.frame("e").loc[ten, "requests"] == 12
    assert "first minute 00:10 kept as stored (12 requests): this log starts inside it (10 seen)" in out, out
