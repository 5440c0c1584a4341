"""``warmcast calibrate`` against ONE real vLLM CPU server (the fixture of test_vllm_server.py).

The calibrated rate is checked by a load generator written here, independent of warmcast's:
open-loop Poisson arrivals, streamed completions, TTFT per request.  A step below the
calibrated rate (0.8x) the SLO holds; at 1.5x it does not.  The machine is small and shared, so
the steps are short, the bound is far from both regimes (unloaded TTFT is tens of ms; past the knee the
queue grows by the second), each check sends a few dozen requests, and each side of the check
gets a second measurement (the server's share of the shared machine drifts; see the test).
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from warmup.calibration.store import CalibrationStore
from warmup.actuators.launch import default_vllm_python_path

VLLM_PY = default_vllm_python_path()  # the real vLLM server fixture ``server`` is in conftest.py

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}")]

ROOT = Path(__file__).resolve().parents[2]
TTFT_BOUND_MS = 1000.0
OUTPUT = 32
FAST = ["--scenarios", "short", "--no-burst", "--warmup-s", "2", "--step-s", "8", "--probe-s", "5",
        "--drain-s", "5", "--output-tokens", str(OUTPUT), "--max-steps", "8"]


def _cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warmcast.cli", "calibrate", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


async def _ttfts(url: str, model: str, rate: float, seconds: float, warmup_s: float = 3.0,
                 prompt: int = 60, seed: int = 7) -> list[float]:
    """TTFT (ms; inf for a failure or no answer 10 s after the last arrival) of the requests sent
    in ``seconds`` after ``warmup_s`` at ``rate`` req/s."""
    rng = np.random.default_rng(seed)
    body = {"model": model, "max_tokens": OUTPUT, "ignore_eos": True, "temperature": 0.0, "stream": True}

    async def one(c: aiohttp.ClientSession, measured: bool) -> float | None:
        # aiohttp, as vllm bench serve and warmcast's load client time streams; read to the end, so
        # that each request loads the server as a user's does
        t0, ttft = time.perf_counter(), None
        try:
            async with c.post(f"{url}/v1/completions",
                              json={**body, "prompt": rng.integers(10, 1000, prompt).tolist()}) as r:
                async for line in r.content:
                    if ttft is None and line.startswith(b"data: {"):
                        ttft = (time.perf_counter() - t0) * 1000.0
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return math.inf if measured else None
        return (ttft if ttft is not None else math.inf) if measured else None

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as c:
        tasks, t, start = [], 0.0, time.perf_counter()
        while t < warmup_s + seconds:
            await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
            tasks.append((asyncio.create_task(one(c, t >= warmup_s)), t >= warmup_s))
            t += rng.exponential(1.0 / rate)
        done, pending = await asyncio.wait([p for p, _ in tasks], timeout=10)
        for p in pending:
            p.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [p.result() if p in done else math.inf for p, measured in tasks if measured]


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(0.99 * len(xs))) - 1)]


@pytest.mark.flaky(reruns=1)  # calibration and check again, when the machine's load moved between them
def test_calibrate_finds_a_rate_that_holds_the_slo_and_1_5x_breaks_it(server, tmp_path):  # noqa: F811
    out = tmp_path / "cal"
    r = _cli(["--url", server.url, "--out", str(out), "--slo-ttft-p99-ms", str(TTFT_BOUND_MS), *FAST])
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "calibration.json").read_text())
    assert (out / "calibration.png").stat().st_size > 10_000
    cap = doc["capacity"]["rps"]
    curve = doc["scenarios"]["short"]["curve"]
    assert doc["capacity"]["rpm"] == pytest.approx(cap * 60, rel=1e-3) and doc["capacity"]["tokens_per_s"] > 0
    assert any(not p["passed"] for p in curve), "the search had no failing rate: no real answer"
    assert doc["server"]["model"] == server.model and doc["server"]["vllm_version"]
    assert "scaled by" in doc["matrix"]["scaling"] and doc["hardware"]["cores"]
    for p in curve:
        assert {"p50", "p95", "p99"} <= set(p["ttft_ms"]) and {"p50", "p95", "p99"} <= set(p["itl_ms"])

    # Independent check.  The calibrated rate is the last that passed, so its P99 sits just under the
    # bound (943 ms of 1,000 in one run) and a second 20 s sample there passes or fails by chance;
    # past the knee the P99 rose 8x within 6% of rate.  So the SLO must hold a step below it, at
    # 0.8x, and break at 1.5x: the knee lies between.  The machine is shared and the server's share
    # of it moves within minutes, so each side gets up to two alternated measurements.
    holds: list[float] = []
    over: list[float] = []
    for seed in (7, 8):
        if not holds or min(holds) > TTFT_BOUND_MS:
            holds.append(_p99(asyncio.run(_ttfts(server.url, server.model, cap * 0.8, 20.0, seed=seed))))
        if not over or max(over) <= TTFT_BOUND_MS:
            over.append(_p99(asyncio.run(_ttfts(server.url, server.model, cap * 1.5, 20.0, seed=seed))))
    steps = [(p["rate_rps"], p["passed"], p["ttft_ms"]["p99"]) for p in curve]
    assert min(holds) <= TTFT_BOUND_MS < max(over), f"capacity {cap} req/s; check P99 {holds} / {over} ms; " \
                                                    f"steps {steps}"


def test_bad_input_ends_clearly_and_keeps_the_stored_calibration(server, tmp_path, redis_client,  # noqa: F811
                                                                 key_prefix, redis_server_url):
    deps = tmp_path / "deployments.yaml"
    deps.write_text("deployments:\n  - name: caldep\n    profiles:\n      day: {capacity_rpm: 100}\n")
    env = {"WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_DEPLOYMENTS_FILE": str(deps), "WARMCAST_STATE_DIR": str(tmp_path / "state")}
    store = CalibrationStore(redis_client, key_prefix)
    store.put("caldep", "day", {"capacity": {"rpm": 42.0}})
    out = tmp_path / "cal"
    out.mkdir()
    (out / "calibration.json").write_text('{"previous": true}')
    base = ["--url", server.url, "-d", "caldep", "--out", str(out), *FAST]

    no_model = _cli([*base, "--model", "no-such-model"], env)
    assert no_model.returncode == 2 and "not served" in no_model.stderr and "no-such-model" in no_model.stderr
    unmeetable = _cli([*base, "--slo-ttft-p99-ms", "0.01", "--max-steps", "2"], env)
    assert unmeetable.returncode == 2, unmeetable.stdout + unmeetable.stderr
    assert "no rate meets the SLO" in unmeetable.stderr and "TTFT P99" in unmeetable.stderr

    assert store.versions("caldep", "day") == [1] and store.get("caldep", "day")["capacity"]["rpm"] == 42.0
    assert json.loads((out / "calibration.json").read_text()) == {"previous": True}
    assert not (out / "calibration.png").exists()
