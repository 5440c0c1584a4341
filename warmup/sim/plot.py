"""fleet.png: demand against warm (ready) capacity per policy, provisioned replicas, and lateness."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from warmup.sim.fleet import policy_label

COLORS = {"oracle": "#2ca02c", "predictive": "#1f77b4", "reactive": "#d62728", "queue": "#ff7f0e",
          "static": "#9467bd"}


def plot_fleet(result, path: str | Path, window: Optional[tuple[int, int]] = None, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = result.split
    times = split.times
    lo, hi = window if window is not None else (0, split.minutes)
    t = times[lo:hi]
    cap = result.cfg.capacity_rpm
    fig, axes = plt.subplots(3, 1, figsize=(14, 9.5), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1.6, 1.2]})
    ax = axes[0]
    ax.plot(t, split.demand[lo:hi], color="black", lw=0.6, alpha=0.55, label="demand (requests/min)")
    for name, run in result.runs.items():
        ax.step(t, run.ready[lo:hi] * cap, where="post", lw=1.3, color=COLORS.get(name), alpha=0.9,
                label=f"{policy_label(name, result.rows.get(name, {}))}: warm capacity")
    pred = result.runs.get("predictive")
    if pred is not None and pred.events:
        ymin = 0.0
        ups = [e for e in pred.events if e[1] == "scale" and lo <= e[0] < hi]
        if ups:
            ax.scatter([times[e[0]] for e in ups], [ymin] * len(ups), marker="|", s=80, color=COLORS["predictive"],
                       label="predictive scale actions", zorder=3)
        wu = [e for e in pred.events if e[1] == "warmup" and lo <= e[0] < hi]
        if wu:
            ax.scatter([times[e[0]] for e in wu], [cap * 0.5] * len(wu), marker="^", s=30, color="#e377c2",
                       label="predictive warmups", zorder=3)
        sw = [e for e in pred.events if e[1] == "switch" and lo <= e[0] < hi]
        for e in sw:
            ax.axvline(times[e[0]], color="#8c564b", ls="--", lw=1)
    ax.set_ylabel("requests / min")
    top, note = demand_ylim(split.demand[lo:hi], {n: r.ready[lo:hi] * cap for n, r in result.runs.items()})
    ax.set_ylim(0, top)
    if note:
        ax.text(0.995, 0.98, note, transform=ax.transAxes, ha="right", va="top", fontsize=8, color="#555")
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    ax.set_title(title_text(result.rows, title), fontsize=9)

    ax = axes[1]
    for name, run in result.runs.items():
        ax.step(t, run.provisioned[lo:hi], where="post", lw=1.1, color=COLORS.get(name),
                label=policy_label(name, result.rows.get(name, {})))
    ax.set_ylabel("provisioned\n(booting + ready)")
    ax.legend(loc="upper left", fontsize=8, ncol=5)

    _late_panel(axes[2], result, t, lo, hi)
    axes[2].set_xlabel("time (UTC)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


HEADROOM = 1.5   # the demand panel's y-axis ends at 1.5x the peak demand shown


def demand_ylim(demand, capacity: dict) -> tuple[float, str]:
    """(the demand panel's top, a note naming the lines it clips): the axis follows the demand, so one
    policy's capacity far above it (a KEDA queue at 100 replicas) does not flatten everything else to
    the bottom (issue 46: its line stretched the axis to 200,000 req/min)."""
    peak = float(max(demand.max(), 1.0)) if len(demand) else 1.0
    top = HEADROOM * peak
    over = {n: float(c.max()) for n, c in capacity.items() if len(c) and c.max() > top}
    if not over:
        return max(top, *(float(c.max()) * 1.05 for c in capacity.values() if len(c))), ""
    said = ", ".join(f"{n} to {v:,.0f}" for n, v in sorted(over.items()))
    return top, f"y-axis clipped at {HEADROOM:g}x the peak demand; warm capacity runs off the top: {said} req/min"


def title_text(rows: dict, title: str = "") -> str:
    """The title: the run's own line, then each policy's figures, two to a line, so none is cut off."""
    parts = [f"{policy_label(n, r)}: {r['gpu_hours_vs_oracle']:.2f}x GPU, {r['late_pct']:.3f}% late"
             + (f" (SLO {r['slo_on_test']})" if "slo_on_test" in r else "")
             for n, r in rows.items() if r.get("gpu_hours_vs_oracle") is not None]
    lines = ([title] if title else []) + ["   ".join(parts[i:i + 2]) for i in range(0, len(parts), 2)]
    return "\n".join(lines)


def _late_panel(ax, result, t, lo: int, hi: int) -> None:
    """Late requests per minute per policy, and the SLO's allowance at each minute's demand."""
    for name, run in result.runs.items():
        late = run.late[lo:hi]
        if late.sum() > 0:
            ax.plot(t, late, lw=1.0, color=COLORS.get(name),
                    label=f"{policy_label(name, result.rows.get(name, {}))} ({late.sum():,.0f})")
    slo = result.meta.get("slo")
    if slo:  # the late requests the SLO allows each minute, at that minute's demand
        ax.plot(t, result.split.demand[lo:hi] * slo["late_share"], color="black", lw=0.8, ls="--",
                label=f"SLO: {slo['late_share'] * 100:g}% of demand")
    ax.set_ylabel("requests late\n(> 5 s) / min")
    ax.set_yscale("symlog", linthresh=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8, ncol=5)
