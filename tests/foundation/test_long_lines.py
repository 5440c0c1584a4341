"""A 25 MB line (issue 31: it aborted the process in 4 of 16 runs) is refused by name, file and line:
`ingest` stores nothing and exits 2, `ingest --follow` skips it and counts the lines after it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from warmcast.ingest.follow import Follower
from warmcast.ingest.formats import PRESETS
from warmcast.ingest.readers import MAX_LINE_BYTES

BIG = 25_000_000
LIMIT = f"line longer than {MAX_LINE_BYTES:,} bytes"
M0 = int(time.time() // 60) - 30


def _env(redis_server_url: str, key_prefix: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
            "WARMCAST_STATE_DIR": str(tmp_path / "state")}


def _record(minute: int, i: int = 0) -> str:
    return json.dumps({"created": minute * 60 + i, "usage": {"prompt_tokens": 10, "completion_tokens": 2}})


@pytest.mark.parametrize("name, head, fmt", [
    ("big.csv", "time,requests\n2024-01-01 00:00:00,1\n2024-01-01 00:01:00,", []),
    ("big.jsonl", _record(M0) + "\n" + '{"created": ', ["--format", "openai"]),
])
def test_ingest_refuses_a_25_mb_line_and_stores_nothing(tmp_path, redis_server_url, key_prefix, store, snap,
                                                        name, head, fmt):
    idx = pd.date_range("2024-01-01", periods=3, freq="min", name="time")
    store.upsert_frame("big", pd.DataFrame({"requests": [1.0, 2.0, 3.0]}, index=idx), now_ns=idx[-1].value)
    before = snap()
    log = tmp_path / name
    log.write_text(head + "7" * BIG)         # no newline: the whole rest of the file is one line
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "ingest", str(log), "-d", "big", *fmt],
                       capture_output=True, text=True, timeout=300, env=_env(redis_server_url, key_prefix, tmp_path))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])  # an abort would be -6
    assert f"{log}:{head.count(chr(10)) + 1}: {LIMIT}" in r.stderr and "nothing was stored" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert snap() == before


def test_follow_skips_a_25_mb_line_naming_it_and_counts_the_lines_after(store, tmp_path):
    log = tmp_path / "access.jsonl"
    log.write_text("".join(_record(M0, i) + "\n" for i in range(3)) + '{"created": ' + "7" * BIG)
    f = Follower(log, "gw", store, PRESETS["openai"])
    rep = f.poll(now_s=M0 * 60 + 30)
    assert rep.lines == 3 and rep.bad == [f"{log}:4: {LIMIT} (the limit, warmcast.ingest.readers.MAX_LINE_BYTES): "
                                          "not one request's record"]
    with open(log, "a") as fh:               # the rest of the long line, its end, then ordinary lines
        fh.write("7" * 1000 + "}\n" + "".join(_record(M0, 10 + i) + "\n" for i in range(2)))
    rep = f.poll(now_s=(M0 + 1) * 60 + 15)
    assert rep.lines == 2 and rep.bad == []
    assert store.frame("gw")["requests"].dropna().to_dict() == {pd.Timestamp(M0 * 60, unit="s"): 5.0}
    assert f.state().line == 7               # later errors still name the right line


def test_cli_follow_once_survives_a_25_mb_line(tmp_path, redis_server_url, key_prefix):
    log = tmp_path / "gateway.jsonl"
    log.write_text(_record(M0) + "\n" + '{"created": ' + "7" * BIG)
    deps = tmp_path / "deployments.yaml"
    deps.write_text(f"deployments:\n  - name: gw\n    signals: {{arrivals: access_log, access_log: {log}}}\n"
                    "    profiles: {day: {capacity_rpm: 100}}\n")
    env = {**_env(redis_server_url, key_prefix, tmp_path), "WARMCAST_DEPLOYMENTS_FILE": str(deps)}
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "ingest", "--follow", "-d", "gw", "--once",
                        "--format", "openai"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert f"skipped {log}:2: {LIMIT}" in r.stderr and "1 lines" in r.stdout, (r.stdout, r.stderr)
