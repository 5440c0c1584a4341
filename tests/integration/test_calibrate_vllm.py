"""``warmcast calibrate`` against ONE real vLLM CPU server (the fixture of test_vllm_server.py),
every load step sent by ``vllm bench serve`` (the vLLM environment's own tool).

The calibrated rate is then checked by the same tool run on its own, with nothing of warmcast's:
its own Poisson arrivals (``--request-rate``, ``--seed``) and its own random prompt tokens, at 0.8x
the calibrated rate (the SLO holds) and at 1.5x (it does not).  The server takes token ids (it was
started with ``--skip-tokenizer-init``); the tool draws them from the tiny word-level tokenizer
built here.  The machine is small and shared, so the bound is far from both regimes (unloaded TTFT
is tens of ms; past the knee the queue grows by the second), each check lasts as long as the
answer's two steps, and each side of the check gets a second measurement (the server's share of the
shared machine drifts).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from warmup.calibration.benchserve import DRIVER
from warmup.calibration.store import CalibrationStore
from warmup.actuators.launch import default_vllm_python_path, write_tiny_tokenizer
from warmup.actuators.local import other_cores, pin_to

VLLM_PY = default_vllm_python_path()  # the real vLLM server fixture ``server`` is in conftest.py

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}")]

ROOT = Path(__file__).resolve().parents[2]
TTFT_BOUND_MS = 1000.0
OUTPUT = 32
WARMUP_S = 3.0  # each step's unmeasured warm-up at its rate (FAST's --warmup-s), in the checks too
# The checks last as long as the answer's sustained step (--hold-s): a sustained rate, as a planner uses
# the capacity (15-s checks read 1,018 ms at 1.5x a capacity held with confidence, which sits below the
# knee: an overload just past it builds its queue slowly; a capacity two 15-s steps held broke a 30-s
# check at 0.8x of it).  20 s here, not the CLI's 30: the suite's time (the answer is as sustained as
# its check, whatever the length).
CHECK_S = 20.0
STEP_S = 15.0  # the CLI's default step; each check lasts as long: a queue near the knee takes seconds
#               to build, so 8-s steps passed 5.35 req/s (P99 519 ms) that 20-s checks failed (1479 ms)


def _flags(step_s: float, hold_s: float) -> list[str]:
    return ["--scenarios", "short", "--no-burst", "--warmup-s", f"{WARMUP_S:g}", "--step-s", str(step_s),
            "--hold-s", str(hold_s), "--probe-s", "5", "--drain-s", "5", "--output-tokens", str(OUTPUT),
            "--max-steps", "10"]


FAST = _flags(STEP_S, CHECK_S)
QUICK = _flags(3.0, 3.0)  # bad input measures nothing: its steps only have to run (15-s steps cost CI 15 s each)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tok"), VLLM_PY)


def _cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warmcast.cli", "calibrate", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, preexec_fn=pin_to(other_cores(0)),
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _tool_p99(server, tokenizer: Path, rate: float, prompt: int, seconds: float, seed: int, tmp: Path) -> float:
    """``vllm bench serve`` on its own: TTFT P99 (ms; inf when a request failed) of the requests it sends
    at its own Poisson arrivals over ``seconds`` after a warm-up of WARMUP_S, as each calibration step
    is measured (a check from an empty server read 531 ms at 1.5x a capacity whose steps, past a
    warm-up, broke the SLO at 1.2x it: the queue of an overload had 15 s to build, not 18).  The trace
    file gives only lengths (--no-self-timed); its per-request results say which requests to skip."""
    warm = round(rate * WARMUP_S)
    n = max(20, warm + round(rate * seconds))
    trace = tmp / f"lengths-{seed}.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": prompt, "output_length": OUTPUT,
                                         "hash_ids": list(range(i * 100, i * 100 + math.ceil(prompt / 16)))}) + "\n"
                             for i in range(n)))
    argv = ["--backend", "vllm", "--base-url", server.url, "--endpoint", "/v1/completions", "--model", server.model,
            "--tokenizer", str(tokenizer), "--dataset-name", "timed_trace", "--dataset-path", str(trace),
            "--no-self-timed", "--request-rate", f"{rate:.4f}", "--num-prompts", str(n), "--seed", str(seed),
            "--percentile-metrics", "ttft", "--metric-percentiles", "99", "--disable-tqdm", "--save-result",
            "--save-detailed", "--result-dir", str(tmp), "--result-filename", f"check-{seed}.json"]
    proc = subprocess.run([str(VLLM_PY), "-c", DRIVER, *argv], capture_output=True, text=True, timeout=600,
                          preexec_fn=pin_to(other_cores(0)))   # off the engine's core, as the server's API
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = json.loads((tmp / f"check-{seed}.json").read_text())
    ttfts = [t * 1000.0 if not e and t else math.inf for t, e in zip(r["ttfts"], r["errors"])][warm:]
    return float(np.percentile(ttfts, 99)) if all(math.isfinite(t) for t in ttfts) else math.inf


@pytest.mark.alone
@pytest.mark.timeout(1500)    # up to 10 steps of 15 s (one of ~300 requests) and four 30-s checks, 2 shared cores
def test_calibrate_finds_a_rate_that_holds_the_slo_and_1_5x_breaks_it(server, tokenizer, tmp_path):  # noqa: F811
    out = tmp_path / "cal"
    r = _cli(["--url", server.url, "--out", str(out), "--slo-ttft-p99-ms", str(TTFT_BOUND_MS),
              "--tokenizer", str(tokenizer), *FAST])
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "calibration.json").read_text())
    assert (out / "calibration.png").stat().st_size > 10_000
    cap = doc["capacity"]["rps"]
    curve = doc["scenarios"]["short"]["curve"]
    assert doc["capacity"]["rpm"] == pytest.approx(cap * 60, rel=1e-3) and doc["capacity"]["tokens_per_s"] > 0
    assert any(not p["passed"] for p in curve), "the search had no failing rate: no real answer"
    assert doc["server"]["model"] == server.model and doc["server"]["vllm_version"]
    assert doc["generator"]["name"] == "vllm bench serve" and doc["generator"]["vllm_version"] == "0.32.0"
    assert "load generator: vllm bench serve" in r.stdout
    assert "scaled by" in doc["matrix"]["scaling"] and doc["hardware"]["cores"]
    for p in curve:
        assert {"p50", "p95", "p99"} <= set(p["ttft_ms"]) and {"p50", "p95", "p99"} <= set(p["itl_ms"])
        assert p["held_at_start"] == 0, p   # each step started on a server holding no request (settle)

    cap_doc = doc["capacity"]
    assert cap_doc["requests"] >= doc["matrix"]["requests_to_resolve_p99"] == 299
    assert cap_doc["ttft_p99_upper_ms"] <= TTFT_BOUND_MS and f"held over {cap_doc['requests']} requests" in r.stdout
    assert [x["standing"] for x in doc["scenarios"]["short"]["rates"] if x["rate_rps"] == cap] == ["held"]

    # Independent check, by the tool alone.  The calibrated rate held over ~300 requests with the P99's
    # upper bound under the bound, but a 15-s sample near the knee passes or fails by chance (past the
    # knee the P99 rose 8x within 6% of rate).  So the SLO must hold a step below it, at 0.8x, and
    # break at 1.5x: the knee lies between.  The machine is shared and the server's share
    # of it moves within minutes, so each side gets up to two alternated measurements.
    holds: list[float] = []
    over: list[float] = []
    prompt = doc["scenarios"]["short"]["parts"][0]["prompt_tokens"]
    for seed in (7, 8):
        if not holds or min(holds) > TTFT_BOUND_MS:
            holds.append(_tool_p99(server, tokenizer, cap * 0.8, prompt, CHECK_S, seed, tmp_path))
        if not over or max(over) <= TTFT_BOUND_MS:
            over.append(_tool_p99(server, tokenizer, cap * 1.5, prompt, CHECK_S, 100 + seed, tmp_path))
    steps = [(p["rate_rps"], p["passed"], p["ttft_ms"]["p99"], p["settle_s"], p["held_at_start"]) for p in curve]
    steps += [(x["rate_rps"], x["standing"], x["requests"]) for x in doc["scenarios"]["short"]["rates"]]
    print(f"capacity {cap} req/s held over {cap_doc['requests']} requests (P99 upper bound "
          f"{cap_doc['ttft_p99_upper_ms']} ms); the tool alone at 0.8x: P99 {holds} ms, at 1.5x: {over} ms; "
          f"steps (rate, passed, P99, settle s, held at start) {steps}")  # -s
    assert min(holds) <= TTFT_BOUND_MS < max(over), f"capacity {cap} req/s; check P99 {holds} / {over} ms; " \
                                                    f"steps {steps}"


def test_bad_input_ends_clearly_and_keeps_the_stored_calibration(server, tokenizer, tmp_path, redis_client,  # noqa: F811
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
    base = ["--url", server.url, "-d", "caldep", "--out", str(out), "--tokenizer", str(tokenizer), *QUICK]

    no_model = _cli([*base, "--model", "no-such-model"], env)
    assert no_model.returncode == 2 and "not served" in no_model.stderr and "no-such-model" in no_model.stderr
    no_tool = _cli([*base, "--bench-python", str(tmp_path / "no-vllm" / "python")], env)
    assert no_tool.returncode == 2 and "vllm bench serve not found" in no_tool.stderr
    assert "scripts/setup-vllm.sh" in no_tool.stderr and "--bench-python" in no_tool.stderr
    no_tokenizer = _cli([*base, "--tokenizer", str(tmp_path / "no-such-tokenizer"), "--max-steps", "2"], env)
    assert no_tokenizer.returncode == 2 and "vllm bench serve exited" in no_tokenizer.stderr
    assert "--tokenizer" in no_tokenizer.stderr, no_tokenizer.stderr
    unreachable = _cli([*base, "--url", "http://127.0.0.1:9"], env)
    assert unreachable.returncode == 2 and "unreachable" in unreachable.stderr
    unmeetable = _cli([*base, "--slo-ttft-p99-ms", "0.01", "--max-steps", "2"], env)
    assert unmeetable.returncode == 2, unmeetable.stdout + unmeetable.stderr
    assert "no rate meets the SLO" in unmeetable.stderr and "TTFT P99" in unmeetable.stderr

    assert store.versions("caldep", "day") == [1] and store.get("caldep", "day")["capacity"]["rpm"] == 42.0
    assert json.loads((out / "calibration.json").read_text()) == {"previous": True}
    assert not (out / "calibration.png").exists()
