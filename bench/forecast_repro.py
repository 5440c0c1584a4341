"""Reproducible training (issue 13): the same LSTM backtest twice at the same time, the second
beside a process that burns a core; the forecasts must be byte-identical.

    .venv/bin/python bench/forecast_repro.py [--quick] [--doc none]

Both runs are ``warmcast backtest forecast --models lstm`` on the Azure 2024 conversation trace
(test from 2024-05-17 00:00), the default configuration unless ``--quick``.  Training has no
wall-clock stop, a fixed thread count and deterministic algorithms, so load may slow a run but
must not change a weight.  Writes its section of docs/BENCHMARKS.md (``bench:forecast_repro``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import docsection  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "azure2024_conversation_per_minute.csv"
TEST_START = "2024-05-17 00:00"
BURNER = "while True: pass"


def start(out: Path, quick: bool) -> subprocess.Popen:
    argv = [sys.executable, "-m", "warmcast.cli", "backtest", "forecast", "--log", str(TRACE), "--test-start",
            TEST_START, "--models", "lstm", "--out", str(out), *(["--quick"] if quick else [])]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def outcome(out: Path, seconds: float) -> dict:
    data = (out / "forecasts.csv").read_bytes()
    m = json.loads((out / "metrics.json").read_text())["models"]["lstm"]
    return {"wall_s": seconds, "mae": m["mae"], "fit_s": m.get("fit_seconds"), "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": data}


def run_pair(tmp: Path, quick: bool) -> dict[str, dict]:
    """Run a and b together, b with the burner beside it; wait for both."""
    burner = subprocess.Popen([sys.executable, "-c", BURNER])
    t0 = time.perf_counter()
    procs = {"a": start(tmp / "a", quick), "b (plus the burner)": start(tmp / "b", quick)}
    ends = {}
    try:
        while len(ends) < len(procs):
            for k, p in procs.items():
                if k not in ends and p.poll() is not None:
                    ends[k] = time.perf_counter() - t0
                    if p.returncode != 0:
                        raise SystemExit(f"run {k} failed: {p.stderr.read()[-2000:]}")
            time.sleep(0.5)
    finally:
        burner.kill()
    return {k: outcome(tmp / ("a" if k == "a" else "b"), ends[k]) for k in procs}


def report(runs: dict[str, dict], quick: bool) -> str:
    lines = ["| run | wall s | fit s | LSTM MAE | sha256 of forecasts.csv |", "|---|---|---|---|---|"]
    for k, r in runs.items():
        fit = "-" if r["fit_s"] is None else f"{r['fit_s']:.1f}"
        lines.append(f"| {k} | {r['wall_s']:.1f} | {fit} | {r['mae']:.3f} | `{r['sha256'][:16]}` |")
    a, b = runs.values()
    same = a["bytes"] == b["bytes"]
    lines += ["", f"Configuration: {'--quick (tiny network)' if quick else 'default'}. The two forecasts.csv files are "
              f"**{'byte-identical' if same else 'DIFFERENT'}**."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tiny LSTM (a smoke test of the script)")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load, command = os.getloadavg()[0], docsection.command_line()
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_pair(Path(tmp), args.quick)
    text = report(runs, args.quick)
    print(text)
    docsection.publish(args.doc, "forecast_repro", docsection.provenance(load, command) + "\n" + text)
    a, b = runs.values()
    return 0 if a["bytes"] == b["bytes"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
