"""The local-process backend with real vLLM CPU servers, crashes, and `warmcast measure-coldstart`.

Runs before test_vllm_server.py (file order) and stops its servers in teardown, so
no more than two vLLM servers run at once on this 2-core machine.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import httpx
import pytest
import redis

from warmup.actuators.coldstart import coldstart_key, load_coldstart
from warmup.actuators.launch import CPU_TEST_ARGS, REPO_ROOT, default_vllm_python_path, gpu_available, write_tiny_llama
from warmup.actuators.local import InstanceCrashed, LocalServer, free_port
from warmup.actuators.scalers import LocalProcessScaler
from warmup.actuators.vllm_client import VLLMClient, fleet_health, fleet_metrics

VLLM_PY = default_vllm_python_path()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}: run scripts/setup-vllm.sh"),
]
ARGS = {**CPU_TEST_ARGS, "max-num-seqs": 2, "block-size": 32}


def _clients(urls):
    return [VLLMClient(u, name=u, retries=2, backoff_s=0.05) for u in urls]


async def _close(clients):
    for c in clients:
        await c.aclose()


def test_local_backend_scales_0_to_2_to_1_and_reports_a_crash(tmp_path):
    model = write_tiny_llama(tmp_path / "model")
    state = tmp_path / "local-scaler.json"
    scaler = LocalProcessScaler("it-local", model, ARGS, base_port=free_port(8500), python=VLLM_PY,
                                log_dir=tmp_path, state_file=state)
    try:
        assert scaler.current() == 0 and scaler.ready_urls() == []

        up = scaler.scale_to(2, "test: 0 -> 2")
        assert up.applied and up.previous == 0 and up.target == 2 and len(up.detail["started"]) == 2
        assert scaler.current() == 2  # starting processes count as replicas
        ready = asyncio.run(scaler.wait_ready(300))
        assert sorted(ready) == sorted(up.detail["started"]) and all(5 < t < 300 for t in ready.values())
        assert sorted(scaler.ready_urls()) == sorted(ready)

        # Another warmcast process (a restarted worker) sees the same two servers through the state file.
        other = LocalProcessScaler("it-local", model, ARGS, python=VLLM_PY, state_file=state, stop_at_exit=False)
        assert sorted(other.adopted) == sorted(ready) and other.current() == 2
        assert sorted(other.ready_urls()) == sorted(ready)
        other.detach()

        async def serve_all(urls):
            cs = _clients(urls)
            try:
                health = await fleet_health(cs)
                done = [await c.complete(16, 4) for c in cs]
                return health, done
            finally:
                await _close(cs)

        health, done = asyncio.run(serve_all(list(ready)))
        assert all(r.ok for r in health) and all(d.completion_tokens == 4 for d in done)

        again = scaler.scale_to(2, "test: same target")  # idempotent: nothing started
        assert again.applied and not again.changed and again.detail["started"] == []

        down = scaler.scale_to(1, "test: 2 -> 1")
        assert down.previous == 2 and down.detail["stopped"] == [up.detail["started"][1]]  # newest first
        assert scaler.current() == 1 and scaler.ready_urls() == [up.detail["started"][0]]
        with pytest.raises(httpx.ConnectError):
            httpx.get(up.detail["started"][1] + "/health", timeout=2)

        # The survivor crashes (SIGKILL of its whole process group): the fleet read names it
        # and carries on; the backend reaps it and reports 0 live replicas.
        survivor = scaler.servers[0]
        survivor.kill_hard()

        async def read(urls):
            cs = _clients(urls)
            try:
                return await fleet_metrics(cs)
            finally:
                await _close(cs)

        fleet = asyncio.run(read([survivor.url, up.detail["started"][1]]))
        assert fleet.answered == 0 and set(fleet.errors) == {survivor.url, up.detail["started"][1]}
        assert all("failed after 2 attempt" in e for e in fleet.errors.values())
        assert scaler.current() == 0 and scaler.exited[-1] is survivor
        healed = scaler.scale_to(0, "test: done")
        assert healed.applied and healed.detail["started"] == []
    finally:
        scaler.close()
    assert all(not s.alive for s in scaler.exited)


def test_crashing_launch_gives_clear_error(tmp_path):
    model = write_tiny_llama(tmp_path / "model")  # max_position_embeddings 2048
    srv = LocalServer(model, {**ARGS, "max-model-len": 4096}, port=free_port(8550), python=VLLM_PY,
                      log_dir=tmp_path, name="too-long")
    srv.start()
    try:
        with pytest.raises(InstanceCrashed) as exc:
            srv.wait_healthy_sync(timeout_s=240)
    finally:
        srv.stop()
    msg = str(exc.value)
    assert "too-long" in msg and "exited with code" in msg and "max_model_len" in msg


def test_measure_coldstart_cli_stores_the_figure(tmp_path):
    prefix = f"wctest-{uuid.uuid4().hex[:8]}"
    r = redis.Redis()
    env = {**os.environ, "WARMCAST_REDIS_URL": "redis://127.0.0.1:6379/0", "WARMCAST_KEY_PREFIX": prefix,
           "WARMCAST_STATE_DIR": str(tmp_path), "WARMCAST_VLLM_PYTHON": str(VLLM_PY)}
    env.pop("WARMCAST_DEPLOYMENTS_FILE", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "warmcast.cli", "measure-coldstart", "--deployment", "demo",
             "--warmup-requests", "4", "--repeats", "2", "--port", str(free_port(8560))],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        out = proc.stdout
        assert "time to healthy:" in out and "first request, cold:" in out and "first request after warmup" in out
        assert f"stored as {prefix}:coldstart:demo" in out
        if not gpu_available():
            assert "sleep/wake: not measured" in out and "--enable-sleep-mode" in out
        got = load_coldstart(r, prefix, "demo")
        assert got is not None and got.deployment == "demo" and got.backend == "local"
        assert 1 < got.time_to_healthy_s < 400 and got.first_request_cold_s > 0 and got.first_request_warm_s > 0
        assert got.warmup_requests == 4 and got.engine_args["block-size"] == 32  # demo's 16 made CPU-safe
        assert json.loads(r.get(coldstart_key(prefix, "demo")))["cold_start_min"] == pytest.approx(got.cold_start_min)
        assert load_coldstart(r, prefix, "absent") is None
    finally:
        for key in r.scan_iter(f"{prefix}:*"):
            r.delete(key)
