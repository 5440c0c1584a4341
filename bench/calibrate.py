"""Capacity calibration on the vLLM CPU server with ``vllm bench serve`` as the load generator:
the matrix, then the tool's own check of the calibrated rate.

    .venv/bin/python bench/calibrate.py            # ~25 min on 2 shared cores

One server (the tiny random-weight Llama, max-num-seqs 4, the engine on one core, its API and scheduler
processes and every load client on the other, the word-level tokenizer of
warmup/actuators/tiny_tokenizer.py in its directory).  Part 1: ``warmcast calibrate`` over the
whole matrix (short / medium / long / 70-30 mix, burst), every step sent by ``vllm bench serve``
(warmup/calibration/benchserve.py); its calibration.png is copied to docs/img/calibration_cpu.png.
Part 2: ``vllm bench serve`` run on its own, with its random dataset and its own Poisson
arrivals (nothing of warmcast's), at 0.8x and 1.5x the short scenario's calibrated rate: the SLO
should hold at the first and break at the second.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docsection  # noqa: E402

from warmup.actuators.launch import default_vllm_python_path, write_tiny_llama, write_tiny_tokenizer  # noqa: E402
from warmup.actuators.local import LocalServer, free_port, one_core_env, other_cores, pin_to  # noqa: E402
from warmup.calibration import report  # noqa: E402
from warmup.calibration.benchserve import DRIVER  # noqa: E402

VLLM_PY = default_vllm_python_path()


def start_server(tmp: Path, chars: bool = False) -> LocalServer:
    """The bench's server; ``chars``: the one-token-per-character tokenizer (GuideLLM sends text)."""
    model = write_tiny_tokenizer(write_tiny_llama(tmp / "model"), VLLM_PY, chars=chars)
    args = {"load-format": "dummy", "enforce-eager": True, "max-num-seqs": 4, "max-model-len": 2048,
            "kv-cache-memory-bytes": 128 * 1024 * 1024, "block-size": 32}
    srv = LocalServer(model, args, port=free_port(8700), python=VLLM_PY, log_dir=tmp, name="bench-calibrate",
                      env=one_core_env(0), cpus=other_cores(0))
    srv.start()
    srv.wait_healthy_sync(timeout_s=600)
    return srv


WARMUP_S = 3.0   # each calibration step's unmeasured warm-up (matrix's --warmup-s); the checks skip as much


def tool_check(srv: LocalServer, rate: float, prompt: int, output: int, seconds: float, seed: int,
               tmp: Path) -> dict:
    """``vllm bench serve`` alone: its random dataset, its Poisson arrivals at ``rate``; the tool's result
    with ``p99_ttft_ms`` and ``failed`` over the requests after a WARMUP_S warm-up, as a step is measured
    (from an empty server an overload's queue has less time to build than in a step)."""
    warm = round(rate * WARMUP_S)
    n = max(20, warm + round(rate * seconds))
    argv = ["--backend", "vllm", "--base-url", srv.url, "--endpoint", "/v1/completions", "--model", srv.model,
            "--dataset-name", "random", "--random-input-len", str(prompt), "--random-output-len", str(output),
            "--random-range-ratio", "0", "--ignore-eos", "--num-prompts", str(n), "--request-rate", f"{rate:.4f}",
            "--seed", str(seed), "--save-result", "--save-detailed", "--result-dir", str(tmp),
            "--result-filename", f"check-{seed}.json", "--percentile-metrics", "ttft,e2el", "--metric-percentiles",
            "50,99", "--disable-tqdm"]
    proc = subprocess.run([str(VLLM_PY), "-c", DRIVER, *argv], capture_output=True, text=True, timeout=900,
                          preexec_fn=pin_to(other_cores(0)))
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {proc.stderr[-2000:]}")
    r = json.loads((tmp / f"check-{seed}.json").read_text())
    ttfts = [t * 1000.0 if not e and t else float("inf") for t, e in zip(r["ttfts"], r["errors"])][warm:]
    failed = sum(1 for t in ttfts if t == float("inf"))
    r.update(p99_ttft_ms=float(np.percentile(ttfts, 99)) if not failed else float("inf"), failed=failed,
             measured=len(ttfts))
    return r


def matrix(url: str, out: Path, args: argparse.Namespace, extra: tuple[str, ...] = ()) -> dict:
    cmd = [sys.executable, "-m", "warmcast.cli", "calibrate", "--url", url, "--out", str(out),
           "--slo-ttft-p99-ms", str(args.slo_ttft_ms), "--slo-e2e-p99-ms", str(args.slo_e2e_ms),
           "--step-s", str(args.step_s), "--hold-s", str(args.hold_s), "--warmup-s", "3", "--probe-s", "6",
           "--drain-s", "8",
           "--max-steps", str(args.max_steps), *extra]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   preexec_fn=pin_to(other_cores(0)))   # the client off the engine's core, as the server's API
    return json.loads((out / "calibration.json").read_text())


def matrix_lines(doc: dict) -> list[str]:
    lines = [f"{doc['matrix']['scaling']}", "",
             "| scenario | probe req/s | ladder low/typical/peak req/s | capacity req/min | tokens/s | steps |",
             "|---|---|---|---|---|---|"]
    for name, s in doc["scenarios"].items():
        ladder = "/".join(f"{v:.3g}" for v in s["rates_rps"].values())
        steps = ", ".join(f"{p['rate_rps']:.3g}{'✓' if p['passed'] else '✗'}" for p in s["curve"])
        lines.append(f"| {name} | {s['probe_rps']:.3g} | {ladder} | {s['capacity_rpm']} | {s['tokens_per_s']} | "
                     f"{steps} |")
    b = doc.get("burst")
    if b:
        lines.append(f"\nburst {b['low_rps']:.3g} -> {b['high_rps']:.3g} req/s: TTFT P99 {b['ttft_p99_before_ms']} ms "
                     f"before, {b['ttft_p99_during_ms']} ms during; {report.burst_text(b)}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-s", type=float, default=15.0, help="seconds per load step (the CLI's default)")
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--hold-s", type=float, default=30.0, help="seconds of a step meant to hold the answer "
                    "(the CLI's default): a rate holds once one step at it lasted this long")
    ap.add_argument("--check-s", type=float, default=None, help="seconds of each independent check (default: "
                    "--hold-s; a queue near the knee takes seconds to build, so a check longer than the steps "
                    "judges a different load: 10-s steps against 30-s checks broke the SLO at 0.8x)")
    ap.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    ap.add_argument("--slo-e2e-ms", type=float, default=5000.0)
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "calibration_cpu.png")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    args.check_s = args.hold_s if args.check_s is None else args.check_s
    return on_server(args, "calibrate", run)


def on_server(args: argparse.Namespace, section: str, body: Callable[[object, argparse.Namespace, Path], None],
              chars: bool = False) -> int:
    """``body(server, args, tmp)`` on the bench's server, its prints written into ``section``."""
    load, command = os.getloadavg()[0], docsection.command_line()
    tmp = Path(tempfile.mkdtemp(prefix=f"warmcast-bench-{section}-"))
    srv = start_server(tmp, chars=chars)
    try:
        with docsection.printed_into(args.doc, section, load, command):
            body(srv, args, tmp)
    finally:
        srv.stop()
        print(f"(server logs and JSON under {tmp})")
    return 0


def run(srv: LocalServer, args: argparse.Namespace, tmp: Path) -> None:
    """The matrix, then the tool's own check; everything printed goes into bench:calibrate."""
    doc = matrix(srv.url, tmp / "matrix", args)
    shutil.copy(tmp / "matrix" / "calibration.png", args.plot)
    gen = doc["generator"]
    print(f"matrix, every step sent by {gen['name']} (vLLM {gen['vllm_version']}, dataset {gen['dataset']}); "
          f"plot: {args.plot.relative_to(ROOT)}; SLO: {doc['slo_text']}:")
    print("\n".join(matrix_lines(doc)))
    print(f"capacity: {doc['capacity']['rpm']} req/min ({doc['capacity']['scenario']}), "
          f"{doc['capacity']['tokens_per_s']} tokens/s")
    short = doc["scenarios"]["short"]
    cap, prompt, output = short["capacity_rps"], short["parts"][0]["prompt_tokens"], short["output_tokens"]
    print(f"\nindependent check: vllm bench serve alone (random dataset, its Poisson arrivals, {args.check_s:g} s "
          f"after a {WARMUP_S:g}-s warm-up; TTFT P99 over those, e2e P99 over the whole run), "
          f"prompt {prompt} / output {output} tokens, the short scenario's capacity {cap} req/s:")
    print("| rate | req/s | completed | TTFT P99 ms | e2e P99 ms | SLO (TTFT P99 <= "
          f"{args.slo_ttft_ms:g} ms) |\n|---|---|---|---|---|---|")
    for i, k in enumerate((0.8, 1.5)):
        r = tool_check(srv, cap * k, prompt, output, args.check_s, 100 + i, tmp)
        verdict = "meets" if r["p99_ttft_ms"] <= args.slo_ttft_ms and r["failed"] == 0 else "breaks"
        print(f"| {k}x | {cap * k:.3f} | {r['measured'] - r['failed']}/{r['measured']} | {r['p99_ttft_ms']:.1f} | "
              f"{r['p99_e2el_ms']:.1f} | {verdict} |")


if __name__ == "__main__":
    raise SystemExit(main())
