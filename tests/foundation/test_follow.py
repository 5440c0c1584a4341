"""Arrivals from a gateway's access log (issue 13): ``warmcast ingest --follow`` against the real
Redis, on a JSON-lines log the test appends to as a gateway would (OpenAI-format records).
Minutes are written once over, gaps are zeros, late lines are counted and not stored, a killed
follower counts nothing twice, a rotated log is read from its start, and the deployments file
decides who writes a deployment's arrivals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from warmcast.errors import InputError
from warmcast.ingest.follow import Follower
from warmcast.ingest.formats import PRESETS

M0 = int(time.time() // 60) - 30  # a minute half an hour ago: inside the store's window


def append(path: Path, minute: int, n: int, offset_s: float = 0.0, bad: str | None = None) -> None:
    """``n`` requests in ``minute`` (epoch minutes), as a gateway logs them."""
    with open(path, "a") as fh:
        for i in range(n):
            fh.write(json.dumps({"created": minute * 60 + offset_s + i * 50 / max(n, 1),
                                 "usage": {"prompt_tokens": 100, "completion_tokens": 20}}) + "\n")
        if bad is not None:
            fh.write(bad + "\n")


def follower(store, path: Path, grace_s: float = 10.0) -> Follower:
    return Follower(path, "gw", store, PRESETS["openai"], grace_s=grace_s)


def stored(store) -> dict[int, float]:
    if "gw" not in store.deployments():
        return {}
    s = store.frame("gw")["requests"].dropna()
    return {int(t.value // 60_000_000_000): float(v) for t, v in s.items()}


def test_minutes_are_written_once_over_with_zeros_between_and_the_open_one_kept(store, tmp_path):
    log = tmp_path / "access.jsonl"
    append(log, M0, 7)
    append(log, M0 + 2, 4)          # no request in M0 + 1: the gateway logged none, so it is a zero
    append(log, M0 + 3, 5)
    f = follower(store, log)
    rep = f.poll(now_s=(M0 + 3) * 60 + 30)  # M0 + 3 is not over yet
    assert rep.lines == 16 and rep.minutes_written == 3
    assert stored(store) == {M0: 7.0, M0 + 1: 0.0, M0 + 2: 4.0}
    assert f.state().open == {M0 + 3: [5.0, 500.0, 100.0]}
    append(log, M0 + 3, 2, offset_s=30)
    f.poll(now_s=(M0 + 4) * 60 + 5)   # over, but within the 10 s grace: still open
    assert M0 + 3 not in stored(store)
    f.poll(now_s=(M0 + 4) * 60 + 11)
    assert stored(store)[M0 + 3] == 7.0
    assert store.frame("gw")["input_tokens"].dropna().iloc[0] == 700.0


def test_a_killed_follower_resumes_from_its_last_save_and_counts_nothing_twice(store, tmp_path, redis_client):
    log = tmp_path / "access.jsonl"
    append(log, M0, 3)
    f = follower(store, log)
    f.poll(now_s=M0 * 60 + 20)
    saved = redis_client.get(f.key)  # what a follower killed during the next poll left behind
    append(log, M0, 2, offset_s=30)
    append(log, M0 + 1, 6)
    f.poll(now_s=(M0 + 2) * 60 + 15)  # wrote M0 and M0 + 1 ... then "died" before its save
    redis_client.set(f.key, saved)
    rep = follower(store, log).poll(now_s=(M0 + 2) * 60 + 16)  # a new process resumes
    assert rep.lines == 8 and rep.minutes_written == 2
    assert stored(store) == {M0: 5.0, M0 + 1: 6.0}


def test_late_lines_are_counted_not_stored_and_bad_lines_named(store, tmp_path):
    log = tmp_path / "access.jsonl"
    append(log, M0, 3)
    f = follower(store, log)
    f.poll(now_s=(M0 + 1) * 60 + 15)
    append(log, M0, 1, bad='{"created": "yesterday-ish"}')  # a line for a written minute, and a bad one
    append(log, M0 + 1, 2)
    rep = f.poll(now_s=(M0 + 2) * 60 + 15)
    assert rep.late == 1 and "1 late lines not stored" in rep.summary()
    assert len(rep.bad) == 1 and f"{log}:5: column 'created'" in rep.bad[0]
    assert stored(store) == {M0: 3.0, M0 + 1: 2.0}


def test_a_rotated_log_is_read_from_its_start(store, tmp_path):
    log = tmp_path / "access.jsonl"
    append(log, M0, 4)
    f = follower(store, log)
    f.poll(now_s=M0 * 60 + 30)
    os.rename(log, tmp_path / "access.jsonl.1")  # logrotate's create mode: a new file, a new inode
    assert f.poll(now_s=M0 * 60 + 31).lines == 0  # between rename and new file: nothing written
    append(log, M0 + 1, 3)
    rep = f.poll(now_s=(M0 + 2) * 60 + 15)
    assert rep.rotated and rep.lines == 3
    assert stored(store) == {M0: 4.0, M0 + 1: 3.0}


def test_a_count_series_is_not_followed(store, tmp_path):
    with pytest.raises(InputError, match="--follow counts requests"):
        Follower(tmp_path / "x.jsonl", "gw", store, PRESETS["counts"])


DEPLOYMENTS = """
deployments:
  - name: gw
    signals: {{arrivals: access_log, access_log: {log}}}
    profiles: {{day: {{capacity_rpm: 100}}}}
  - name: counted
    profiles: {{day: {{capacity_rpm: 100}}}}
"""


def _cli_env(tmp_path, redis_server_url, key_prefix, log: Path) -> dict[str, str]:
    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS.format(log=log))
    return {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
            "WARMCAST_DEPLOYMENTS_FILE": str(deps), "WARMCAST_STATE_DIR": str(tmp_path / "state")}


def test_cli_follows_the_deployments_log_until_sigterm(store, tmp_path, redis_server_url, key_prefix):
    log = tmp_path / "gateway.jsonl"
    now_min = int(time.time() // 60)
    append(log, now_min - 3, 9)
    append(log, now_min - 2, 4)
    env = _cli_env(tmp_path, redis_server_url, key_prefix, log)
    proc = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "ingest", "--follow", "-d", "gw",
                             "--poll-s", "0.2", "--grace-s", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and stored(store).get(now_min - 2) != 4.0:
            time.sleep(0.3)
        got = stored(store)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert got[now_min - 3] == 9.0 and got[now_min - 2] == 4.0, (got, out, err)
    assert proc.returncode == 0 and f"following {log} for gw" in out, err


def test_cli_refuses_a_deployment_that_counts_its_arrivals_from_counters(tmp_path, redis_server_url, key_prefix):
    log = tmp_path / "gateway.jsonl"
    append(log, M0, 1)
    env = _cli_env(tmp_path, redis_server_url, key_prefix, log)
    run = subprocess.run([sys.executable, "-m", "warmcast.cli", "ingest", "--follow", "-d", "counted", str(log),
                          "--once"], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "counts arrivals from its instances' counters" in run.stderr
    assert "Traceback" not in run.stderr
    missing = subprocess.run([sys.executable, "-m", "warmcast.cli", "ingest", "--follow", "-d", "gw",
                              str(tmp_path / "nope.jsonl"), "--once"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode != 0 and "no such file" in missing.stderr


def test_a_log_fed_deployment_gets_no_arrivals_from_its_counters(tmp_path, redis_client, key_prefix,
                                                                 redis_server_url):
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import ingest

    env = _cli_env(tmp_path, redis_server_url, key_prefix, tmp_path / "gateway.jsonl")
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix,
                             deployments_file=Path(env["WARMCAST_DEPLOYMENTS_FILE"]), state_dir=tmp_path / "state")
    ctx = Ctx(settings, WorkerOptions(simulate=False), redis_client)
    now_min = int(time.time() // 60)
    for dep in ("gw", "counted"):  # what a signals round would have counted for both
        redis_client.hset(f"{key_prefix}:arrivals:{dep}", str(now_min - 2), 12)
        redis_client.hset(f"{key_prefix}:rounds:{dep}", mapping={f"{now_min - 2}:expected": 1})
    assert ingest.step(ctx, "gw").minutes == 0
    assert ingest.step(ctx, "counted").minutes >= 1
    assert np.isclose(ctx.store.frame("counted")["requests"].dropna().iloc[-1], 12.0)


def test_round3_item3_a_log_silent_for_hours_is_not_written_as_hours_of_zeros(store, tmp_path):
    """Issue 41 (3): --follow on a log that stopped 3 h ago wrote 170 zero minutes in one poll, as if the
    service had had no traffic.  Zeros go only up to the silence limit after the last line; later
    minutes stay missing, and the report says since when the log has been silent."""
    log = tmp_path / "access.jsonl"
    start = int(time.time() // 60) - 180
    append(log, start, 6)
    append(log, start + 2, 4)
    f = Follower(log, "gw", store, PRESETS["openai"])  # the default silence limit: 5 minutes
    rep = f.poll(now_s=time.time())
    assert stored(store) == {start: 6.0, start + 1: 0.0, start + 2: 4.0,
                             **{start + 2 + i: 0.0 for i in range(1, 6)}}  # 5 minutes of zeros, then missing
    assert rep.minutes_written == 8 and rep.silent_since == start + 2
    assert "log silent since" in rep.summary() and "left missing, not zero" in rep.summary()
    assert f.poll(now_s=time.time()).silent_since is None  # said once per silence
    now_min = int(time.time() // 60)
    append(log, now_min, 3)  # the log speaks again: the silence stays missing, the minute is written
    f.poll(now_s=(now_min + 1) * 60 + 15)
    assert stored(store)[now_min] == 3.0 and len(stored(store)) == 9
