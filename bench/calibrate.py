"""Capacity calibration on the vLLM CPU server: warmcast's load generator against ``vllm bench serve``,
then the calibration matrix.

    .venv/bin/python bench/calibrate.py            # ~15 min on 2 shared cores

One server (the tiny random-weight Llama, max-num-seqs 4, one core, a word-level tokenizer
built by bench/tiny_tokenizer.py so that ``vllm bench serve`` can build its random prompts
as text).  Part 1: at the same Poisson rate, the same prompt and output lengths and the
same number of requests, ``vllm bench serve`` (vLLM's own generator, run with the .venv-vllm
interpreter) and then warmcast's client (warmup/calibration/loadgen.py), replaying the send
times vLLM's run recorded, measure throughput and P99 TTFT / end-to-end latency; ``--rounds``
times each, compared per round and over all rounds' requests pooled.  Part 2: ``warmcast
calibrate`` over the whole matrix (short / medium / long / 70-30 mix, burst), its
calibration.png copied to docs/img/calibration_cpu.png.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docsection  # noqa: E402

from warmup.actuators.launch import default_vllm_python_path, write_tiny_llama  # noqa: E402
from warmup.actuators.local import LocalServer, free_port, one_core_env  # noqa: E402
from warmup.calibration import loadgen  # noqa: E402
from warmup.calibration.search import Scenario  # noqa: E402
from warmup.core.stats import quantile  # noqa: E402
from warmup.calibration.steps import schedule  # noqa: E402

VLLM_PY = default_vllm_python_path()
PROMPT, OUTPUT = 60, 32
BENCH_DRIVER = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
                "from vllm.benchmarks.serve import add_cli_args, main\n"
                "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")


def start_server(tmp: Path) -> LocalServer:
    model = write_tiny_llama(tmp / "model")
    subprocess.run([str(VLLM_PY), str(ROOT / "bench" / "tiny_tokenizer.py"), str(model)], check=True)
    args = {"load-format": "dummy", "enforce-eager": True, "max-num-seqs": 4, "max-model-len": 2048,
            "kv-cache-memory-bytes": 128 * 1024 * 1024, "block-size": 32}
    srv = LocalServer(model, args, port=free_port(8700), python=VLLM_PY, log_dir=tmp, name="bench-calibrate",
                      env=one_core_env(0))
    srv.start()
    srv.wait_healthy_sync(timeout_s=600)
    return srv


def summary(ttft_ms: list[float], e2e_ms: list[float], ok: int, n: int, duration_s: float) -> dict[str, float]:
    """The figures both generators report, computed the same way (vLLM's: completed / whole run)."""
    return {"requests": n, "completed": ok, "throughput_rps": ok / duration_s,
            "ttft_p50_ms": quantile(sorted(ttft_ms), 0.5), "ttft_p99_ms": quantile(sorted(ttft_ms), 0.99),
            "e2e_p99_ms": quantile(sorted(e2e_ms), 0.99), "ttfts_ms": list(ttft_ms), "e2es_ms": list(e2e_ms)}


async def warmcast_run(url: str, rate: float, n: int, seed: int, at_s: list[float] | None = None) -> dict[str, float]:
    """``at_s``: send times to replay (the vllm bench run's own, so both generators face the same
    arrivals; one round's P99 otherwise rests on which of two Poisson draws bunched more)."""
    sc = Scenario("short", ((1.0, PROMPT, "short"),), OUTPUT)
    arrivals = schedule(sc, rate, 0.0, 10 * n / rate, np.random.default_rng(seed))[:n]
    if at_s is not None:
        arrivals = [replace(a, at_s=t) for a, t in zip(arrivals, at_s)]
    else:  # as vllm bench serve does: Poisson gaps rescaled so that the n arrivals span exactly n / rate
        k = (n / rate) / arrivals[-1].at_s
        arrivals = [replace(a, at_s=a.at_s * k) for a in arrivals]
    async with loadgen.load_client(url) as client:
        records = await loadgen.send(client, arrivals, drain_s=120.0, seed=seed)
    ok = [r for r in records if r.ok]
    end = max(r.arrival.at_s + r.e2e_ms / 1000.0 for r in ok)
    return summary([r.ttft_ms for r in ok], [r.e2e_ms for r in ok], len(ok), len(records), end)


def vllm_run(url: str, model: str, rate: float, n: int, seed: int, out: Path) -> dict[str, float]:
    argv = ["--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions", "--model", model,
            "--dataset-name", "random", "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
            "--random-range-ratio", "0", "--random-prefix-len", "0", "--ignore-eos", "--num-prompts", str(n),
            "--request-rate", str(rate), "--seed", str(seed), "--save-result", "--result-dir", str(out),
            "--result-filename", f"vllm-{seed}.json", "--percentile-metrics", "ttft,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm", "--save-detailed"]
    proc = subprocess.run([str(VLLM_PY), "-c", BENCH_DRIVER, *argv], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {proc.stderr[-2000:]}")
    r = json.loads((out / f"vllm-{seed}.json").read_text())
    ok = [i for i, e in enumerate(r["errors"]) if not e]
    return {"requests": n, "completed": r["completed"], "throughput_rps": r["request_throughput"],
            "ttft_p50_ms": r["p50_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"], "e2e_p99_ms": r["p99_e2el_ms"],
            "ttfts_ms": [r["ttfts"][i] * 1000.0 for i in ok], "e2es_ms": [r["latencies"][i] * 1000.0 for i in ok],
            "at_s": [t - min(r["start_times"]) for t in sorted(r["start_times"])]}


def compare(srv: LocalServer, rate: float, n: int, rounds: int, tmp: Path) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {"warmcast": [], "vllm bench serve": []}
    for i in range(rounds):  # vllm first: warmcast's client then replays the same send times
        runs["vllm bench serve"].append(vllm_run(srv.url, srv.model, rate, n, i, tmp))
        at_s = runs["vllm bench serve"][-1]["at_s"]
        runs["warmcast"].append(asyncio.run(warmcast_run(srv.url, rate, n, seed=i, at_s=at_s)))
        print(f"round {i + 1}: " + "; ".join(f"{k}: {v[-1]['throughput_rps']:.3f} req/s, TTFT P99 "
                                             f"{v[-1]['ttft_p99_ms']:.1f} ms" for k, v in runs.items()), flush=True)
    return runs


def table(runs: dict[str, list[dict[str, float]]]) -> list[str]:
    keys = ("throughput_rps", "ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms")
    means = {g: {k: float(np.mean([r[k] for r in rs])) for k in keys} for g, rs in runs.items()}
    a, b = means["warmcast"], means["vllm bench serve"]
    lines = ["| generator | completed | throughput req/s | TTFT P50 ms | TTFT P99 ms | e2e P99 ms |",
             "|---|---|---|---|---|---|"]
    for g, m in means.items():
        done = "+".join(str(r["completed"]) for r in runs[g])
        lines.append(f"| {g} | {done} | {m['throughput_rps']:.3f} | {m['ttft_p50_ms']:.1f} | "
                     f"{m['ttft_p99_ms']:.1f} | {m['e2e_p99_ms']:.1f} |")
    diff = {k: (a[k] - b[k]) / b[k] for k in keys}
    lines.append("| difference (warmcast / vllm - 1), means of rounds | | "
                 + " | ".join(f"{diff[k]:+.1%}" for k in keys) + " |")
    # One round's P99 rests on its two slowest requests, so one stall of a shared machine moves it
    # several-fold; the percentiles of all rounds' requests together are the comparison that counts.
    pooled = {g: {"ttft_p50_ms": quantile(sorted(t := sum((r["ttfts_ms"] for r in rs), [])), 0.5),
                  "ttft_p99_ms": quantile(sorted(t), 0.99),
                  "e2e_p99_ms": quantile(sorted(sum((r["e2es_ms"] for r in rs), [])), 0.99)} for g, rs in runs.items()}
    pa, pb = pooled["warmcast"], pooled["vllm bench serve"]
    for g, m in pooled.items():
        lines.append(f"| {g}, all rounds' requests pooled | | {means[g]['throughput_rps']:.3f} | "
                     f"{m['ttft_p50_ms']:.1f} | {m['ttft_p99_ms']:.1f} | {m['e2e_p99_ms']:.1f} |")
    pdiff = {k: (pa[k] - pb[k]) / pb[k] for k in pa}
    lines.append("| difference, pooled | | " + f"{diff['throughput_rps']:+.1%} | "
                 + " | ".join(f"{pdiff[k]:+.1%}" for k in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms")) + " |")
    verdict = abs(diff["throughput_rps"]) <= 0.10 and abs(pdiff["ttft_p99_ms"]) <= 0.10
    lines.append(f"\nthroughput and pooled TTFT P99 within 10%: {'yes' if verdict else 'NO'}")
    return lines


def matrix(url: str, out: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "warmcast.cli", "calibrate", "--url", url, "--out", str(out),
           "--slo-ttft-p99-ms", str(args.slo_ttft_ms), "--slo-e2e-p99-ms", str(args.slo_e2e_ms),
           "--step-s", str(args.step_s), "--warmup-s", "3", "--probe-s", "6", "--drain-s", "8", "--max-steps", "10"]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
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
                     f"before, {b['ttft_p99_during_ms']} ms during; P99 back under {b['bound_ms']:g} ms after "
                     f"{b['recovery_s']} s")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=2.0, help="req/s of the side-by-side runs")
    ap.add_argument("--requests", type=int, default=120, help="requests per run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--matrix", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--step-s", type=float, default=10.0)
    ap.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    ap.add_argument("--slo-e2e-ms", type=float, default=5000.0)
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "calibration_cpu.png")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load, command = os.getloadavg()[0], docsection.command_line()
    tmp = Path(tempfile.mkdtemp(prefix="warmcast-bench-cal-"))
    srv = start_server(tmp)
    try:
        with docsection.printed_into(args.doc, "calibrate", load, command):
            run(srv, args, tmp)
    finally:
        srv.stop()
        print(f"(server logs and JSON under {tmp})")
    return 0


def run(srv: LocalServer, args: argparse.Namespace, tmp: Path) -> None:
    """The side-by-side rounds, then the matrix; everything printed goes into bench:calibrate."""
    runs = compare(srv, args.rate, args.requests, args.rounds, tmp)
    print(f"\n{args.requests} requests per run at {args.rate:g} req/s (Poisson), prompt {PROMPT} / output "
          f"{OUTPUT} tokens, {args.rounds} alternated rounds, means:")
    print("\n".join(table(runs)))
    if args.matrix:
        doc = matrix(srv.url, tmp / "matrix", args)
        shutil.copy(tmp / "matrix" / "calibration.png", args.plot)
        (tmp / "matrix" / "calibration.json").replace(tmp / "calibration.json")
        print(f"\nmatrix (plot: {args.plot.relative_to(ROOT)}; SLO: {doc['slo_text']}):")
        print("\n".join(matrix_lines(doc)))
        print(f"capacity: {doc['capacity']['rpm']} req/min ({doc['capacity']['scenario']}), "
              f"{doc['capacity']['tokens_per_s']} tokens/s")


if __name__ == "__main__":
    raise SystemExit(main())
