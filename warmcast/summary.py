"""A text summary of a deployment's stored load (the CLI's ``summary`` and the demo), in the
series' own bins: per minute, or per 5 minutes for a 5-minute series, whose per-minute
figures are then labelled as rates."""
from __future__ import annotations

import numpy as np
import pandas as pd

from warmcast.resolution import bin_label, rate_label, resolution_of


def summary_text(frame: pd.DataFrame, deployment: str, last: int) -> str:
    """Totals, the busiest and quietest hours, and a sparkline of the last ``last`` minutes."""
    present = frame.dropna(how="all")
    if present.empty:
        return f"deployment {deployment}: nothing stored"
    res = resolution_of(frame)
    req = frame["requests"]
    hourly = req.resample("h").mean() / res  # a rate per minute, whatever the bins
    per = "/min" if res == 1 else f" {rate_label(res)}"
    stored = "minutes" if res == 1 else f"bins of {res} min"
    lines = [
        f"deployment {deployment}: {len(present):,} {stored} stored, {frame.index[0]} .. {frame.index[-1]} UTC "
        f"({int(req.isna().sum()):,} missing)",
        f"{bin_label(res)}: mean {req.mean():,.1f}  p50 {req.median():,.0f}  p95 {req.quantile(0.95):,.0f}  max {req.max():,.0f}",
        f"busiest hour {hourly.idxmax()} ({hourly.max():,.0f}{per}), quietest {hourly.idxmin()} ({hourly.min():,.0f}{per})",
    ]
    if "ctx_mean" in frame:
        by_hour = frame["ctx_mean"].groupby(frame.index.hour).mean()
        lines.append(f"mean context tokens by hour of day (UTC): {by_hour.idxmin():02d}h {by_hour.min():,.0f} .. "
                     f"{by_hour.idxmax():02d}h {by_hour.max():,.0f}")
    tail = req.iloc[-max(last // res, 1):].resample("h").mean()
    ticks = " ▁▂▃▄▅▆▇█"
    top = np.nanmax(tail.to_numpy()) or 1.0
    spark = "".join(" " if np.isnan(v) else ticks[int(round(v / top * 8))] for v in tail.to_numpy())
    lines.append(f"last {last // 60} h, hourly mean {bin_label(res)}: {spark}")
    return "\n".join(lines)
