"""Hot and cold pools on the overlaid Azure 2023 traces: separate always-on pools, separate
reactive pools, and warmcast's joint plan.

    .venv/bin/python bench/pools.py            # about a minute on one core; writes bench:pools

The conversation trace is the interactive (hot) pool, the code trace the batch (cold)
pool, overlaid on the same clock, over the minutes both logs cover (2023-11-16 from 18:18 UTC).
Instances: hot 40 requests/min at 60% target utilisation, 0.8 GPU and 30 GB each
(max batch 4); cold 60 requests/min, 1 GPU and 40 GB (max batch 16). Shared limits:
24 GPUs, memory <= 80%, hot:cold compute <= 3:1. Cold start 2 min. Hot SLO: at most
0.05% of requests wait more than 5 s; cold deadline: done within 30 min.
The reactive row uses the cold utilisation target that was cheapest while meeting the
deadline on this very log (tuned in hindsight, so at its best); joint is not tuned.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docsection  # noqa: E402

from warmcast.ingest.pool_split import read_requests  # noqa: E402
from warmup.planning.pools import PoolShape, SharedLimits  # noqa: E402
from warmup.sim.pools import PoolRun, PoolSimConfig, replay, run_all  # noqa: E402
from warmup.sim.pools import reactive as reactive_policy  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CONFIG = PoolSimConfig(hot=PoolShape(40, 0.6, 0.8, 30), cold=PoolShape(60, 1.0, 1.0, 40),
                       limits=SharedLimits(24, 80, 0.8, 3.0))


def per_second(hot_log: Path, cold_log: Path) -> tuple[np.ndarray, np.ndarray, pd.Timestamp]:
    hot_t = read_requests(hot_log)["time"]
    cold_t = read_requests(cold_log)["time"]
    # from the first whole minute of the later log to the end of the earlier one: both pools see traffic
    start = max(hot_t.min(), cold_t.min()).ceil("min")
    end = min(hot_t.max(), cold_t.max()).floor("min")
    n = int((end - start).total_seconds())

    def count(t: pd.Series) -> np.ndarray:
        s = (t - start).dt.total_seconds().to_numpy()
        return np.bincount(s[(s >= 0) & (s < n)].astype(int), minlength=n).astype(float)

    return count(hot_t), count(cold_t), start


def tuned_reactive(hot: np.ndarray, cold: np.ndarray) -> tuple[PoolRun, float]:
    """The reactive cold target utilisation that met the deadline at the fewest GPU-hours (hindsight)."""
    best = None
    for u in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2):
        cfg = PoolSimConfig(**{**CONFIG.__dict__, "reactive_cold_utilisation": u})
        run = replay(hot, cold, cfg, reactive_policy(hot, cold, cfg), f"reactive (cold util {u:g})")
        if run.cold_missed == 0 and (best is None or run.gpu_hours < best[0].gpu_hours):
            best = (run, u)
    return best if best else (run, u)


def table(runs: list[PoolRun]) -> str:
    head = (f"{'policy':28} {'hot late %':>10} {'hot SLO':>8} {'cold missed':>11} {'GPU-h hot':>9} "
            f"{'GPU-h cold':>10} {'GPU-h':>7} {'peak GPUs':>9} {'over limit s':>12}")
    rows = [head] + [f"{r.policy:28} {100 * r.hot_late_share:>10.4f} "
                     f"{'met' if r.hot_late_share <= CONFIG.late_share else 'MISSED':>8} {r.cold_missed:>11.0f} "
                     f"{r.hot_gpu_hours:>9.2f} {r.cold_gpu_hours:>10.2f} {r.gpu_hours:>7.2f} {r.peak_gpus:>9.1f} "
                     f"{r.over_limit_s:>12}" for r in runs]
    return "\n".join(rows)


def plot(runs: list[PoolRun], hot: np.ndarray, cold: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    m = np.arange(len(hot) // 60)
    axes[0].plot(m, hot[:len(m) * 60].reshape(-1, 60).sum(1), label="hot (conversation) requests/min")
    axes[0].plot(m, cold[:len(m) * 60].reshape(-1, 60).sum(1), label="cold (code) requests/min")
    axes[0].legend(fontsize=8)
    for r in runs:
        gpus = np.array(r.minutes["hot"]) * CONFIG.hot.gpu_request + np.array(r.minutes["cold"]) * CONFIG.cold.gpu_request
        axes[1].plot(np.arange(len(gpus)), gpus, label=f"{r.policy}: {r.gpu_hours:.1f} GPU-h")
    axes[1].axhline(CONFIG.limits.physical_gpus, color="grey", ls=":", label="GPU limit")
    axes[1].set_ylabel("GPUs held")
    axes[1].set_xlabel("minutes from the start (the log, then 35 min for cold work to finish)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hot", type=Path, default=DATA / "azure2023_conv_requests.csv")
    ap.add_argument("--cold", type=Path, default=DATA / "azure2023_code_requests.csv")
    ap.add_argument("--img", type=Path, default=ROOT / "docs" / "img" / "pools.png")
    ap.add_argument("--out", type=Path, default=None, help="JSON of the figures")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    with docsection.printed_into(args.doc, "pools", os.getloadavg()[0], docsection.command_line()):
        return run(args)


def run(args: argparse.Namespace) -> int:
    hot, cold, start = per_second(args.hot, args.cold)
    print(f"overlaid from {start}: {hot.sum():.0f} hot and {cold.sum():.0f} cold requests over {len(hot) / 60:.0f} min")
    runs = {r.policy: r for r in run_all(hot, cold, CONFIG)}
    best, u = tuned_reactive(hot, cold)
    rows = [runs["always-on"], runs["reactive"], best, runs["joint"]]
    print(table(rows))
    j = runs["joint"]
    meets = j.hot_late_share <= CONFIG.late_share and j.cold_missed == 0 and j.over_limit_s == 0
    fewer = all(j.gpu_hours < r.gpu_hours for r in rows[:3])
    print(f"joint meets hot SLO and cold deadline within the limits: {meets}; fewer GPU-hours than every "
          f"separate policy: {fewer} ({j.gpu_hours:.2f} vs always-on {rows[0].gpu_hours:.2f}, reactive "
          f"{rows[1].gpu_hours:.2f}, reactive tuned in hindsight {best.gpu_hours:.2f})")
    args.img.parent.mkdir(parents=True, exist_ok=True)
    plot([rows[0], best, j], hot, cold, args.img)
    print(f"plot: {os.path.relpath(args.img, ROOT)}")
    if args.out:
        args.out.write_text(json.dumps([{**{k: v for k, v in r.__dict__.items() if k != "minutes"},
                                         "gpu_hours": r.gpu_hours} for r in rows], indent=1))
    return 0 if meets and fewer else 1


if __name__ == "__main__":
    sys.exit(main())
