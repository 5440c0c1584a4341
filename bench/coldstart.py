"""vLLM cold start on the CPU test setup: ``warmcast measure-coldstart`` run as an operator runs it.

    .venv/bin/python bench/coldstart.py [--runs 2] [--doc none]     # about 3 minutes on 2 cores

Each run launches one tiny-Llama vLLM CPU server through the local backend (``--load-format
dummy``), times ``/health``, sends one probe completion cold, runs a warmup shaped like the
deployment's traffic, probes again warm, stops the server and stores the result (the embedded
Redis unless ``WARMCAST_REDIS_URL`` is set).  ``--runs`` eager runs, then one with torch.compile
(``enforce-eager=false``), whose compile happens before ``/health`` answers.  What the command
prints goes into the section ``bench:coldstart`` of docs/BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import docsection  # noqa: E402

MODES = {"eager": [], "torch.compile": ["--engine-arg", "enforce-eager=false"]}


def measure(mode: str, state: Path) -> str:
    argv = [sys.executable, "-m", "warmcast.cli", "measure-coldstart", "--deployment", "demo", *MODES[mode]]
    env = {**os.environ, "WARMCAST_STATE_DIR": str(state)}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"measure-coldstart ({mode}) failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2, help="eager runs (one torch.compile run follows)")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load, command = os.getloadavg()[0], docsection.command_line()
    with tempfile.TemporaryDirectory() as tmp, docsection.printed_into(args.doc, "coldstart", load, command):
        for i, mode in enumerate(["eager"] * args.runs + ["torch.compile"]):
            print(f"--- run {i + 1}: {mode}\n{measure(mode, Path(tmp) / str(i))}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
