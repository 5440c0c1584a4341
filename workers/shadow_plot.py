"""shadow.png: the actual fleet beside warmcast's plan, read at a glance: load against each fleet's
serving capacity (short minutes shaded), instances held, and late requests."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

ACTUAL, WARMCAST = "#d62728", "#1f77b4"


def plot_shadow(minutes: pd.DataFrame, doc: dict[str, Any], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = pd.to_datetime(minutes["minute"])
    fig, axes = plt.subplots(3, 1, figsize=(14, 9), sharex=True, gridspec_kw={"height_ratios": [3, 1.6, 1.2]})
    ax = axes[0]
    ax.plot(t, minutes["arrivals"], color="black", lw=0.6, alpha=0.6, label="arrivals (requests/min)")
    ax.step(t, minutes["actual_capacity_rpm"], where="post", color=ACTUAL, lw=1.2, label="actual fleet: capacity")
    ax.step(t, minutes["warmcast_capacity_rpm"], where="post", color=WARMCAST, lw=1.2,
            label="warmcast's plan: capacity")
    short = minutes["arrivals"] > minutes["actual_capacity_rpm"]
    ax.fill_between(t, 0, minutes["arrivals"].max(), where=short, color=ACTUAL, alpha=0.12, step="post",
                    label="actual fleet short")
    a, w = doc["actual"], doc["warmcast"]
    ax.set_title(f"{title}\ninstance-hours: actual {a['instance_hours']:g}, warmcast {w['instance_hours']:g}   "
                 f"late (simulated): actual {a['late_requests']:,.0f}, warmcast {w['late_requests']:,.0f}   "
                 f"short minutes: actual {a['minutes_short']}, warmcast {w['minutes_short']}", fontsize=9)
    ax.set_ylabel("requests / min")
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    ax = axes[1]
    ax.step(t, minutes["actual_provisioned"], where="post", color=ACTUAL, lw=1.1, label="actual provisioned")
    ax.step(t, minutes["warmcast_provisioned"], where="post", color=WARMCAST, lw=1.1, label="warmcast provisioned")
    ax.step(t, minutes["live_desired"], where="post", color=WARMCAST, lw=0.8, ls=":",
            label="warmcast's live target (audited)")
    ax.set_ylabel("instances")
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    ax = axes[2]
    ax.plot(t, minutes["actual_late"], color=ACTUAL, lw=1.0, label="actual fleet")
    ax.plot(t, minutes["warmcast_late"], color=WARMCAST, lw=1.0, label="warmcast's plan")
    ax.set_ylabel(f"late (> {doc['late_wait_s']:g} s)\nper minute")
    ax.set_yscale("symlog", linthresh=10)
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    axes[2].set_xlabel("time (UTC)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
