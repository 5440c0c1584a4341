"""A text summary of a deployment's stored per-minute load (the CLI's ``summary`` and the demo)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def summary_text(frame: pd.DataFrame, deployment: str, last: int) -> str:
    """Totals, the busiest and quietest hours, and a sparkline of the last ``last`` minutes."""
    present = frame.dropna(how="all")
    if present.empty:
        return f"deployment {deployment}: nothing stored"
    req = frame["requests"]
    hourly = req.resample("h").mean()
    lines = [
        f"deployment {deployment}: {len(present):,} minutes stored, {frame.index[0]} .. {frame.index[-1]} UTC "
        f"({int(req.isna().sum()):,} missing)",
        f"requests/min: mean {req.mean():,.1f}  p50 {req.median():,.0f}  p95 {req.quantile(0.95):,.0f}  max {req.max():,.0f}",
        f"busiest hour {hourly.idxmax()} ({hourly.max():,.0f}/min), quietest {hourly.idxmin()} ({hourly.min():,.0f}/min)",
    ]
    if "ctx_mean" in frame:
        by_hour = frame["ctx_mean"].groupby(frame.index.hour).mean()
        lines.append(f"mean context tokens by hour of day (UTC): {by_hour.idxmin():02d}h {by_hour.min():,.0f} .. "
                     f"{by_hour.idxmax():02d}h {by_hour.max():,.0f}")
    tail = req.iloc[-last:].resample("h").mean()
    ticks = " ▁▂▃▄▅▆▇█"
    top = np.nanmax(tail.to_numpy()) or 1.0
    spark = "".join(" " if np.isnan(v) else ticks[int(round(v / top * 8))] for v in tail.to_numpy())
    lines.append(f"last {last // 60} h, hourly mean requests/min: {spark}")
    return "\n".join(lines)
