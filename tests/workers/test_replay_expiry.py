"""Issue 41 finding 4a: ``warmcast replay`` killed with SIGKILL mid-run left 12-13 keys under its
scratch prefix with no expiry (they were deleted only at the end).  Every key a replay writes gets an
expiry when it is written, so a killed replay's keys go on their own."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from loophelpers import cli_env

DEPLOYMENT = """deployments:
  - name: conv
    cold_start_min: 10
    min_replicas: 2
    max_replicas: 40
    profiles:
      day: {capacity_rpm: 300}
      night: {capacity_rpm: 240}
    schedule:
      timezone: UTC
      windows:
        - {profile: night, start: "22:00", end: "06:00"}
"""


@pytest.fixture
def env(tmp_path, redis_server_url, key_prefix) -> dict[str, str]:
    return cli_env(tmp_path, DEPLOYMENT, redis_server_url, key_prefix)


def test_a_replay_killed_mid_run_leaves_no_key_without_an_expiry(env, tmp_path, redis_client, key_prefix,
                                                                  shared_data):
    proc = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "replay", "-d", "conv", "--log",
                             str(shared_data / "azure2024_conversation_per_minute.csv"), "--test-start",
                             "2024-05-14 20:00", "--test-end", "2024-05-15 08:00", "--forecaster",
                             "seasonal_naive", "--no-plot", "--out", str(tmp_path / "out")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while len(list(redis_client.scan_iter(f"{key_prefix}:replay:*"))) < 12:   # the tick has run
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        time.sleep(2.0)   # a few more replayed minutes, through the switch's pre-warm
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    keys = sorted(k.decode() for k in redis_client.scan_iter(f"{key_prefix}:*"))
    assert len(keys) >= 12 and all(":replay:" in k for k in keys), keys
    never = [k for k in keys if redis_client.ttl(k) < 0]
    assert never == [], f"{len(never)} of {len(keys)} keys never expire: {never}"


def test_the_expiring_client_arms_only_its_namespace_and_keeps_expiries_and_replies(redis_client, key_prefix):
    from workers.expiring import ExpiringRedis

    r = ExpiringRedis(redis_client, f"{key_prefix}:scratch", 500)
    assert r.set(f"{key_prefix}:scratch:a", "1") is True and 490 < redis_client.ttl(f"{key_prefix}:scratch:a") <= 500
    r.set(f"{key_prefix}:scratch:lease", "1", ex=30)                 # its own expiry is kept
    assert redis_client.ttl(f"{key_prefix}:scratch:lease") <= 30
    r.set(f"{key_prefix}:live", "1")                                  # outside the namespace: untouched
    assert redis_client.ttl(f"{key_prefix}:live") == -1
    with r.pipeline() as pipe:
        pipe.hset(f"{key_prefix}:scratch:h", mapping={"x": 1}).xadd(f"{key_prefix}:scratch:s", {"f": "v"})
        pipe.get(f"{key_prefix}:scratch:a")
        replies = pipe.execute()
    assert replies[0] == 1 and replies[2] == b"1" and len(replies) == 3
    assert all(0 < redis_client.ttl(f"{key_prefix}:scratch:{k}") <= 500 for k in "hs")
    assert r.get(f"{key_prefix}:scratch:a") == b"1" and r.delete(f"{key_prefix}:scratch:a") == 1


def test_a_pipeline_writing_one_key_twice_is_armed_once(redis_client, key_prefix):
    from workers.expiring import ExpiringRedis

    r = ExpiringRedis(redis_client, f"{key_prefix}:scratch", 500)
    with r.pipeline() as pipe:
        pipe.sadd(f"{key_prefix}:scratch:set", "a").sadd(f"{key_prefix}:scratch:set", "b")
        assert pipe.execute() == [1, 1]
    assert 0 < redis_client.ttl(f"{key_prefix}:scratch:set") <= 500
