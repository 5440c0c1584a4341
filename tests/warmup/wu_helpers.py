"""Helpers for the decision-core and simulator tests (no Redis needed)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd

from warmup.core import ForecastInput, Instance, InstanceState

T0 = datetime(2024, 5, 17, 10, 0, tzinfo=timezone.utc)


def fleet(ready: int = 0, booting: int = 0, *, busy: bool = True, profile: str = "") -> tuple[Instance, ...]:
    st = InstanceState.READY_BUSY if busy else InstanceState.READY_IDLE
    return tuple(Instance(f"r{i}", st, profile=profile, warmed=True) for i in range(ready)) + tuple(
        Instance(f"b{i}", InstanceState.BOOTING, profile=profile) for i in range(booting))


def flat_forecast(rpm: float | list[float], origin: datetime = T0, horizon: int = 30,
                  spread: float = 0.1) -> ForecastInput:
    path = [float(rpm)] * horizon if not isinstance(rpm, list) else [float(x) for x in rpm]
    lo = tuple(x * (1 - spread) for x in path)
    hi = tuple(x * (1 + spread) for x in path)
    return ForecastInput(origin, (0.1, 0.5, 0.9), (lo, tuple(path), hi), model="test")


def synthetic_minutes(days: int = 4, mean: float = 1500.0, seed: int = 0, start: str = "2024-01-01",
                      ramp_at: int | None = None) -> pd.Series:
    """A per-minute series with a daily cycle and noise (optionally a sharp ramp at a minute of day)."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range(start, periods=days * 1440, freq="min", name="time")
    mod = (idx.hour * 60 + idx.minute).to_numpy()
    if ramp_at is None:
        shape = 0.65 + 0.35 * np.cos(2 * np.pi * (mod / 60.0 - 14) / 24)
    else:
        shape = np.where((mod >= ramp_at) & (mod < 21 * 60), 1.3, 0.4)
    rate = mean * shape
    return pd.Series(rng.poisson(rate).astype(float), index=idx, name="requests")



def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)
