"""Calibration's two load engines on one server: the short scenario calibrated with every step sent
by ``vllm bench serve`` (the default engine) and by GuideLLM, then each answer checked by
``vllm bench serve`` alone (its random dataset, its own Poisson arrivals) at 0.8x and 1.5x.

    .venv/bin/python bench/calibrate_engines.py     # ~10 min on 2 shared cores; needs .venv-guidellm

The server is bench/calibrate.py's (tiny random-weight Llama, max-num-seqs 4, one core) with the
one-token-per-character tokenizer, because GuideLLM sends text.  Both engines get the same
schedule (warmcast's Poisson arrivals as a trace file), so the capacities differ only by what each
tool measures: its client, its timing, its TTFT.  Each answer is the highest rate that held over
at least 299 requests, in two steps, one of them 30 s long (--hold-s, as long as each check), with
its TTFT P99's 95% upper bound within the SLO, and each lies within the
search's tolerance (10%) below its knee, so two engines that measure alike agree within
AGREE = 1.25x (both tolerances and the server's drift between the runs); the run says which.
Where they disagree it says what each read at its rates and what each engine's client cost in CPU
beside the server's (the engine core has one core of two; the client and the server's API process
share the other): a client that takes the server's CPU reads its knee lower.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docsection  # noqa: E402
from calibrate import WARMUP_S, matrix, on_server, tool_check  # noqa: E402

ENGINES = ("vllm-bench", "guidellm")
AGREE = 1.25   # the engines' capacities agree when the larger is at most this many times the smaller


def run(srv, args: argparse.Namespace, tmp: Path) -> None:
    print(f"short scenario, SLO TTFT P99 <= {args.slo_ttft_ms:g} ms, {args.step_s:g}-s steps, {args.hold_s:g} s to "
          f"hold an answer; the check: vllm bench serve alone, {args.hold_s:g} s after a {WARMUP_S:g}-s warm-up at "
          "0.8x and 1.5x the engine's capacity\n")
    print("| engine (version) | steps (req/s, ✓ met) | capacity req/s | held over (P99 / upper bound ms) "
          "| check 0.8x TTFT P99 ms | check 1.5x TTFT P99 ms |\n|---|---|---|---|---|---|")
    rates: dict[str, dict] = {}
    cpu: dict[str, str] = {}
    for i, engine in enumerate(ENGINES):
        before = _cpu_now(srv)
        doc = matrix(srv.url, tmp / engine, args, ("--engine", engine, "--scenarios", "short", "--no-burst"))
        cpu[engine] = _cpu_text(before, _cpu_now(srv))
        short, gen = doc["scenarios"]["short"], doc["generator"]
        steps = ", ".join(f"{p['rate_rps']:.3g}{'✓' if p['passed'] else '✗'}" for p in short["curve"])
        cap, prompt, output = short["capacity_rps"], short["parts"][0]["prompt_tokens"], short["output_tokens"]
        checks = [tool_check(srv, cap * k, prompt, output, args.hold_s, 200 + 10 * i + j, tmp)
                  for j, k in enumerate((0.8, 1.5))]
        met = [c["p99_ttft_ms"] <= args.slo_ttft_ms and not c["failed"] for c in checks]
        cells = [f"{c['p99_ttft_ms']:.1f} ({'meets' if ok else 'breaks'})" for c, ok in zip(checks, met)]
        held = next(r for r in short["rates"] if r["rate_rps"] == cap)
        rates[engine] = {r["rate_rps"]: r for r in short["rates"]}
        print(f"| {gen['name']} {gen['version']} | {steps} | {cap:.3g} | {held['requests']} requests "
              f"({held['ttft_p99_ms']} / {held['ttft_p99_upper_ms']}) | {cells[0]} | {cells[1]} |", flush=True)
        rates[engine]["capacity"] = cap
    print("\nCPU over each calibration (cores on average: client = warmcast calibrate and the engine's processes; "
          "server = vLLM's API and engine core):\n" + "\n".join(f"  {e}: {t}" for e, t in cpu.items()))
    print("\n" + agreement(rates))


def _cpu_now(srv) -> tuple[float, float, float]:
    """(wall s, CPU s of this process's waited-for children, CPU s of the server's process tree)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = 0.0
    root = psutil.Process(srv.pid)
    for p in (root, *root.children(recursive=True)):
        try:
            server += sum(p.cpu_times()[:2])
        except psutil.NoSuchProcess:   # a helper process that ended between the listing and the read
            pass
    return time.monotonic(), kids.ru_utime + kids.ru_stime, server


def _cpu_text(before: tuple[float, float, float], after: tuple[float, float, float]) -> str:
    wall = after[0] - before[0]
    return (f"client {(after[1] - before[1]) / wall:.2f} cores, server {(after[2] - before[2]) / wall:.2f} cores, "
            f"over {wall:.0f} s")


def agreement(rates: dict[str, dict]) -> str:
    """Whether the engines' capacities agree within AGREE, and where not, what each read near the other's."""
    a, b = (rates[e]["capacity"] for e in ENGINES)
    ratio = max(a, b) / min(a, b)
    if ratio <= AGREE:
        return f"capacities {a:.3g} and {b:.3g} req/s: {ratio:.3f}x apart, within the stated {AGREE}x: agree"
    lines = [f"capacities {a:.3g} and {b:.3g} req/s: {ratio:.3f}x apart, over the stated {AGREE}x: disagree. "
             "What each engine read at its rates (pooled TTFT P99 ms, standing):"]
    for e in ENGINES:
        rows = sorted((r for k, r in rates[e].items() if k != "capacity"), key=lambda r: r["rate_rps"])
        lines.append(f"  {e}: " + ", ".join(f"{r['rate_rps']:.3g} req/s {r['ttft_p99_ms']} ({r['standing']}, "
                                            f"{r['requests']} requests)" for r in rows))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-s", type=float, default=15.0)
    ap.add_argument("--hold-s", type=float, default=30.0, help="a step meant to hold the answer, and each check")
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    ap.add_argument("--slo-e2e-ms", type=float, default=5000.0)
    docsection.add_doc_option(ap)
    return on_server(ap.parse_args(), "calibrate_engines", run, chars=True)


if __name__ == "__main__":
    raise SystemExit(main())
