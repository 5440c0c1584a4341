"""Day/night profile switches in the fleet simulator, as ``warmcast backtest fleet`` runs them.

    .venv/bin/python bench/switches.py [--doc none]        # under a minute

A day/night deployment (``bench/switch_daynight.yaml``: short chats by day at 300 requests/min per
replica, long contexts by night at 200) on the Azure 2024 conversation trace, test from 2024-05-17,
the simulator's seasonal-profile forecaster (no training).  What the CLI prints (every policy's
GPU-hours and lateness, the switches, the GPU-hours and late requests inside them) goes into the
section ``bench:switches`` of docs/BENCHMARKS.md.
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

TRACE = ROOT.parent / "shared" / "data" / "azure2024_conversation_per_minute.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load, command = os.getloadavg()[0], docsection.command_line()
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "warmcast.cli", "backtest", "fleet", "--log", str(TRACE), "--deployments-file",
                str(ROOT / "bench" / "switch_daynight.yaml"), "--test-start", "2024-05-17",
                "--forecaster", "sim_seasonal_profile", "--out", tmp, "--no-plot"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            raise SystemExit(f"backtest fleet failed:\n{done.stderr[-3000:]}")
        with docsection.printed_into(args.doc, "switches", load, command):
            print(done.stdout.replace(tmp, "DIR").strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
