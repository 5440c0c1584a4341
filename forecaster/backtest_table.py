"""The forecast backtest's plain-text table: one row per model, MAE by the leads that really exist."""
from __future__ import annotations

import math


def mae_columns(r: int, horizon: int) -> list[tuple[str, int]]:
    """(column, lead index) of the table's MAE@N columns: the leads ending nearest 1, 15 and 30 minutes
    ahead, named by the minute they really end at (on a 10-minute series MAE@10, @20, @30; a column
    per distinct lead, so none repeats another under a different name)."""
    out: list[tuple[str, int]] = []
    for minute in (1, 15, 30):
        k = min(max(math.ceil(minute / r), 1), horizon) - 1
        if all(k != j for _, j in out):
            out.append((f"MAE@{(k + 1) * r}", k))
    return out


def table(metrics: dict) -> str:
    """A plain-text table of the headline metrics, one row per model."""
    r = metrics.get("resolution_min", 1)  # MAE@N: the lead that ends N minutes ahead (a bin's, on a coarse series)
    horizon = max((len(m["mae_by_lead"]) for m in metrics["models"].values()), default=1)
    cols = mae_columns(r, horizon)
    rows = [("model", "MAE", *(c for c, _ in cols), "WAPE", "MASE(sn)", "cov10-90", "cov90", "cov95",
             "cov99", "pinball", "fit s", "ms/fc")]
    for name, m in sorted(metrics["models"].items(), key=lambda kv: kv[1]["mae"] or math.inf):
        bl = m["mae_by_lead"]
        f = lambda x, nd=1: "-" if x is None else f"{x:.{nd}f}"  # noqa: E731
        rows.append((name, f(m["mae"]), *(f(bl[min(k, len(bl) - 1)]) for _, k in cols), f(m["wape"], 3),
                     f(m["mase_seasonal_naive"], 3), f(m["coverage_p10_p90"], 3), f(m["coverage_p90"], 3),
                     f(m["coverage_by_level"]["p95"], 3), f(m["coverage_by_level"]["p99"], 3), f(m["pinball"], 1),
                     f(m["fit_seconds"], 1), f(m["predict_ms_per_forecast"], 2)))
    for name, why in metrics.get("skipped", {}).items():
        rows.append((name, "skipped: " + why[:70],) + ("",) * (len(rows[0]) - 2))
    widths = [max(len(str(r[i])) for r in rows if len(str(r[i])) < 40) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        lines.append("  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                               for i, c in enumerate(r) if c != "" or i == 0).rstrip())
    return "\n".join(lines)
