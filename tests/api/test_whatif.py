"""What-if backtests end to end: API -> real Redis broker -> real Celery worker -> poll the result."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from api_helpers import AUTH, synthetic_frame

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(settings, tmp_path):
    pytest.importorskip("workers.tasks", reason="the workers package (issue 6) provides the task")
    env = {**os.environ, "WARMCAST_REDIS_URL": settings.redis_url, "WARMCAST_KEY_PREFIX": settings.key_prefix,
           "WARMCAST_STATE_DIR": str(settings.state_dir), "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "worker.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app:celery_app", "worker", "--pool", "solo",
                          "-Q", "warmcast", "--without-gossip", "--without-mingle", "--without-heartbeat",
                          "-n", f"api-{settings.key_prefix}@%h"], cwd=ROOT, env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    yield tmp_path / "worker.log"
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _poll(client, dep: str, job: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/v1/deployments/{dep}/whatif/{job}").json()
        if body["status"] in ("SUCCESS", "FAILURE"):
            return body
        time.sleep(1)
    raise AssertionError(f"job {job} still {body['status']} after {timeout} s")


def test_whatif_on_stored_load_and_on_an_upload(client, store, worker, tmp_path):
    store.upsert_frame("demo", synthetic_frame(days=2))
    r = client.post("/v1/deployments/demo/whatif", headers=AUTH,
                    json={"policies": ["static", "reactive", "oracle"], "test_start": "2024-01-07T00:00:00",
                          "capacity_rpm": 300, "cold_start_min": 10})
    assert r.status_code == 202, r.text
    body = _poll(client, "demo", r.json()["job_id"])
    assert body["status"] == "SUCCESS", (body, worker.read_text()[-3000:])
    text = str(body["result"])
    for policy in ("static", "reactive", "oracle"):
        assert policy in text
    assert body["result"]["lead"] == {"cold_start_min": 10, "source": "what-if request",
                                      "detail": "cold_start_min given with the what-if"}

    csv = "time,requests\n" + "".join(f"{t:%Y-%m-%d %H:%M:%S},{v:g}\n"
                                      for t, v in synthetic_frame(days=2)["requests"].items())
    up = client.post("/v1/deployments/demo/whatif/upload", headers=AUTH,
                     data={"test_start": "2024-01-07 00:00", "policies": "static,oracle"},
                     files={"file": ("counts.csv", csv.encode())})
    assert up.status_code == 202, up.text
    body = _poll(client, "demo", up.json()["job_id"])
    assert body["status"] == "SUCCESS", (body, worker.read_text()[-3000:])
    assert "uploaded log" in str(body["result"]) and "oracle" in str(body["result"])
    # no cold start given: the worker replays with the planner's lead and names where it came from
    # (no launch measured, no measure-coldstart record here: the deployments file's)
    assert body["result"]["lead"]["source"] == "deployments file", body["result"]["lead"]


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00", "1960-05-01T00:00:00", "9999-12-31T00:00:00"])
def test_round2_a_whatif_test_start_outside_any_load_is_refused_before_queueing(client, store, settings, when):
    """Issue 31: test_start was unbounded (a job queued to fail in the worker).  With load stored, as a
    real deployment has it: the bound, not a missing history, refuses it, and nothing is queued."""
    store.upsert_frame("demo", synthetic_frame(days=2))
    r = client.post("/v1/deployments/demo/whatif", headers=AUTH, json={"test_start": when})
    assert r.status_code == 422 and "between 1971-01-01 and tomorrow" in r.text, r.text
    assert not store.r.keys(f"{settings.key_prefix}:celery:*"), "a job was queued"
