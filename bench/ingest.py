"""Ingest throughput and peak memory: warmcast's chunked reader vs a plain pandas read.

    .venv/bin/python bench/ingest.py [--rows 5000000] [--small 1000000] [--doc none]

Generates two synthetic request logs (5M and 1M rows), then, each in a fresh
process, aggregates them per minute with warmcast (chunked) and with the obvious
pandas code (read_csv whole file, groupby minute) as the baseline.  Prints rows/s
and peak RSS for both; the target is >= 500k rows/s and 5M peak <= 1.5x 1M peak.  Writes its
section of docs/BENCHMARKS.md (``bench:ingest``) unless ``--doc none``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docsection  # noqa: E402


def child(kind: str, path: str) -> None:
    start = time.perf_counter()
    if kind == "warmcast":
        from warmcast.ingest import aggregate_file

        frame, report = aggregate_file([path])
        rows = report.rows
    else:
        import pandas as pd

        df = pd.read_csv(path, parse_dates=["timestamp"])
        minute = df["timestamp"].dt.floor("min")
        frame = df.groupby(minute).agg(requests=("input_tokens", "size"), input_tokens=("input_tokens", "sum"),
                                       output_tokens=("output_tokens", "sum"))
        rows = len(df)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": rows, "seconds": seconds, "peak_mb": peak_mb, "minutes": len(frame)}))


def measure(kind: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--small", type=int, default=1_000_000)
    ap.add_argument("--child", nargs=2)
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    from warmcast.generate import WorkloadSpec, write_request_log

    load, command = os.getloadavg()[0], docsection.command_line()

    with tempfile.TemporaryDirectory() as tmp:
        logs = {}
        for label, rows in (("large", args.rows), ("small", args.small)):
            days = 7
            logs[label] = Path(tmp) / f"{label}.csv"
            n = write_request_log(logs[label], WorkloadSpec(days=days, mean_rpm=rows / (days * 1440), seed=1))
            print(f"generated {label} log: {n:,} rows ({logs[label].stat().st_size / 1e6:,.0f} MB)")
        res = {(k, lbl): measure(k, p) for lbl, p in logs.items() for k in ("warmcast", "pandas")}
    text = report(res)
    print(text)
    docsection.publish(args.doc, "ingest", docsection.provenance(load, command) + "\n" + text)


def report(res: dict) -> str:
    """The table and the two targets, as markdown (printed and written into BENCHMARKS)."""
    lines = ["| reader | log | rows | rows/s | peak RSS MB |", "|---|---|---:|---:|---:|"]
    for (kind, label), r in res.items():
        lines.append(f"| {kind} | {label} | {r['rows']:,} | {r['rows'] / r['seconds']:,.0f} | {r['peak_mb']:,.0f} |")
    ours, base = res[("warmcast", "large")], res[("pandas", "large")]
    speed = (ours["rows"] / ours["seconds"]) / (base["rows"] / base["seconds"])
    growth = ours["peak_mb"] / res[("warmcast", "small")]["peak_mb"]
    base_growth = base["peak_mb"] / res[("pandas", "small")]["peak_mb"]
    rate = ours["rows"] / ours["seconds"]
    lines += ["", f"- Throughput on the large log: {rate:,.0f} rows/s (target >= 500,000: "
                  f"{'met' if rate >= 500_000 else 'not met'}), {speed:.2f}x the pandas baseline, which validates "
                  "nothing and builds no context-length histogram.",
              f"- Peak memory, large log / small log: warmcast {growth:.2f}x (target <= 1.5x: "
              f"{'met' if growth <= 1.5 else 'not met'}); pandas {base_growth:.2f}x (it grows with the file)."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
