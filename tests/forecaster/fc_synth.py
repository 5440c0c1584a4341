"""Small synthetic per-minute loads for the forecaster tests (fast, seeded)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def synth_frame(days: float = 3, seed: int = 0, level: float = 200.0, start: str = "2024-03-04",
                tokens: bool = False, gap: tuple[int, int] | None = None) -> pd.DataFrame:
    n = int(days * 1440)
    idx = pd.date_range(start, periods=n, freq="min")
    rng = np.random.default_rng(seed)
    mod = np.arange(n) % 1440
    dow = idx.day_of_week.to_numpy()
    rate = level * (1 + 0.5 * np.sin(2 * np.pi * (mod - 480) / 1440)) * np.where(dow >= 5, 0.6, 1.0)
    y = rng.poisson(rate).astype(float)
    if gap:
        y[gap[0]:gap[1]] = np.nan
    frame = pd.DataFrame({"requests": y}, index=idx)
    if tokens:
        frame["input_tokens"] = np.where(np.isfinite(y), y * 800 + rng.normal(0, 50, n), np.nan)
        frame["output_tokens"] = np.where(np.isfinite(y), y * 150, np.nan)
    frame.index.name = "time"
    return frame

