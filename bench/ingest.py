"""Ingest throughput and peak memory: warmcast's chunked reader vs a plain pandas read.

    .venv/bin/python bench/ingest.py [--rows 5000000] [--small 1000000]

Generates two synthetic request logs (5M and 1M rows), then, each in a fresh
process, aggregates them per minute with warmcast (chunked) and with the obvious
pandas code (read_csv whole file, groupby minute) as the baseline.  Prints rows/s
and peak RSS for both; the target is >= 500k rows/s and 5M peak <= 1.5x 1M peak.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


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
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    from warmcast.generate import WorkloadSpec, write_request_log

    with tempfile.TemporaryDirectory() as tmp:
        logs = {}
        for label, rows in (("large", args.rows), ("small", args.small)):
            days = 7
            logs[label] = Path(tmp) / f"{label}.csv"
            n = write_request_log(logs[label], WorkloadSpec(days=days, mean_rpm=rows / (days * 1440), seed=1))
            print(f"generated {label} log: {n:,} rows ({logs[label].stat().st_size / 1e6:,.0f} MB)")
        res = {(k, lbl): measure(k, p) for lbl, p in logs.items() for k in ("warmcast", "pandas")}
    print(f"\n{'reader':10} {'log':6} {'rows':>11} {'rows/s':>12} {'peak MB':>9}")
    for (kind, label), r in res.items():
        print(f"{kind:10} {label:6} {r['rows']:>11,} {r['rows'] / r['seconds']:>12,.0f} {r['peak_mb']:>9,.0f}")
    ours, base = res[("warmcast", "large")], res[("pandas", "large")]
    speed = (ours["rows"] / ours["seconds"]) / (base["rows"] / base["seconds"])
    growth = ours["peak_mb"] / res[("warmcast", "small")]["peak_mb"]
    print(f"\nwarmcast / pandas throughput on the large log: {speed:.2f}x")
    print(f"warmcast peak memory large/small: {growth:.2f}x (target <= 1.5x); "
          f"pandas: {base['peak_mb'] / res[('pandas', 'small')]['peak_mb']:.2f}x")
    print(f"warmcast rows/s on the large log: {ours['rows'] / ours['seconds']:,.0f} (target >= 500,000)")


if __name__ == "__main__":
    main()
