"""Shared fixtures: a real Redis server (127.0.0.1:6379 or WARMCAST_TEST_REDIS_URL).

Every test gets its own key prefix and its keys are deleted afterwards, so tests can
share one server with each other and with anything else running on it.

Skips: a test skips when a component it needs is missing (the vLLM virtualenv,
Prometheus, Chromium, ../shared/data, a test extra).  That is allowed only where the
environment variable ``CI`` is unset: on a CI run every skip, however raised (``skip``,
``skipif``, ``importorskip``, at collection or in a test), is turned into a failure by
:func:`_skip_fails_on_ci` below.  Tests marked ``gpu`` may skip everywhere: no CI machine
here has a GPU.  The run ends with the number of skips.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import redis

from warmcast.store import LoadStore

# Modules that boot vLLM servers (the engine pinned to core 0), run the worker and beat processes or
# fail a Redis over, and assert on wall-clock ticks and latencies: marked ``realtime``.  scripts/test
# runs them in one pytest run, one test after another, and every other test in a second run beside
# it pinned to the last core, so no second vLLM engine or CPU-bound test lands on the engine's core
# (serially the suite took 31 min on a 2-core machine, against CI's 35).  The ones that measure a
# server's capacity are also marked ``alone`` (in their modules): scripts/test runs them last, alone.
REALTIME = ("integration/", "workers/test_arrivals_vllm.py", "workers/test_switch_vllm.py",
            "workers/test_alerts_e2e.py", "workers/test_e2e_vllm.py", "workers/test_processes.py",
            "workers/test_sentinel.py", "workers/test_run.py", "workers/test_leases.py",
            "workers/test_dropped_e2e.py", "workers/test_shards_e2e.py", "workers/test_fleetfile_e2e.py",
            "foundation/test_redis_sentinel.py")
TESTS = Path(__file__).resolve().parent
REDIS_URL = os.environ.get("WARMCAST_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ON_CI = bool(os.environ.get("CI"))


def _skip_fails_on_ci(report, item=None) -> None:
    """The one place a skip is judged: allowed with CI unset (or for a GPU test), else a failure."""
    if not (ON_CI and report.skipped) or hasattr(report, "wasxfail"):
        return
    if item is not None and item.get_closest_marker("gpu") is not None:
        return  # needs a GPU: may skip everywhere
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped on a CI run (env CI is set), where every component must be present: {reason}"


def pytest_itemcollected(item: pytest.Item) -> None:
    if any(item.path.relative_to(TESTS).as_posix().startswith(m) for m in REALTIME):
        item.add_marker(pytest.mark.realtime)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _skip_fails_on_ci(outcome.get_result(), item)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield  # a module-level skip or importorskip
    _skip_fails_on_ci(outcome.get_result())


def traces_line() -> str:
    """Whether the real traces are there, and what happens to the tests that read them (issue 32: a bare
    clone has no ../shared; the reason surfaced only test by test)."""
    if DATA.is_dir():
        return f"real traces: {DATA}"
    fate = "they FAIL (env CI is set)" if ON_CI else "they are skipped (env CI is unset)"
    return f"real traces: not found at {DATA}: the tests that read them need ../shared/data beside the checkout; {fate}"


def pytest_terminal_summary(terminalreporter) -> None:
    for rep in terminalreporter.stats.get("rerun", []):  # a rerun that passed still says why it failed first
        crash = getattr(getattr(rep.longrepr, "reprcrash", None), "message", None) or rep.longreprtext[-1500:]
        terminalreporter.write_line(f"RERUN {rep.nodeid}, first failure: {crash[:1500]}")
    skipped = len(terminalreporter.stats.get("skipped", []))
    allowed = "GPU tests only, CI is set" if ON_CI else "CI is unset"
    terminalreporter.write_line(f"skipped: {skipped} ({allowed}; the short summary above says why)")
    terminalreporter.write_line(traces_line())


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.ConnectionError:
        pytest.fail(f"tests need a real Redis at {REDIS_URL} (.ci/run starts one); set WARMCAST_TEST_REDIS_URL")
    return REDIS_URL


@pytest.fixture
def redis_client(redis_server_url: str):
    # 30 s reads, as warmcast.runtime's client: redis-py 8's default is 5 s, too short on a loaded 2-core CI
    client = redis.Redis.from_url(redis_server_url, socket_timeout=30)
    yield client
    client.close()


@pytest.fixture
def key_prefix(redis_client) -> str:
    prefix = f"wctest-{uuid.uuid4().hex[:10]}"
    yield prefix
    keys = list(redis_client.scan_iter(f"{prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        redis_client.delete(*keys[i:i + 500])


@pytest.fixture
def store(redis_client, key_prefix) -> LoadStore:
    return LoadStore(redis_client, key_prefix)


@pytest.fixture
def shared_data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"real traces not found at {DATA} (they live beside the checkout in ../shared/data)")
    return DATA


def snapshot(client: redis.Redis, prefix: str) -> dict:
    """Every key under a prefix with its full value, to prove a store did not change."""
    out = {}
    for key in client.scan_iter(f"{prefix}:*", count=1000):
        kind = client.type(key)
        if kind == b"hash":
            out[key] = client.hgetall(key)
        elif kind == b"zset":
            out[key] = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            out[key] = client.smembers(key)
        else:
            out[key] = client.dump(key)
    return out


@pytest.fixture
def snap(redis_client, key_prefix):
    """Call to take a full snapshot of this test's keys."""
    return lambda: snapshot(redis_client, key_prefix)
