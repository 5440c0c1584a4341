"""Small synthetic client panels for the fleet-model tests: a daily cycle, clients of different
sizes under two deployments, seeded."""
from __future__ import annotations

import numpy as np
import pandas as pd

from forecaster.global_lstm import Panel


def synth_panel(days: float = 10, step_min: int = 10, seed: int = 0, levels=(5.0, 40.0, 300.0, 12.0, 80.0, 2000.0),
                groups=("a", "a", "a", "b", "b", "b"), start: str = "2025-01-06") -> Panel:
    n = int(days * 1440 // step_min)
    idx = pd.date_range(start, periods=n, freq=f"{step_min}min")
    rng = np.random.default_rng(seed)
    mod = (idx.hour * 60 + idx.minute).to_numpy()
    rows = []
    for i, lv in enumerate(levels):
        phase = 120 * i  # each client its own busy hours
        rate = lv * (1 + 0.6 * np.sin(2 * np.pi * (mod - 480 - phase) / 1440)) * np.where(idx.day_of_week >= 5, 0.7, 1)
        rows.append(rng.poisson(rate).astype(float))
    names = tuple(f"{g}/c{i}" for i, g in enumerate(groups))
    return Panel(names, idx, np.vstack(rows), step_min, tuple(groups))


def long_frame(panel: Panel) -> pd.DataFrame:
    """The panel as a count file would hold it: model, client, time, requests; zero steps left out."""
    parts = []
    for name, g, row in zip(panel.names, panel.groups, panel.values):
        keep = row > 0
        parts.append(pd.DataFrame({"model": g, "client": name.split("/")[1], "time": panel.index[keep],
                                   "requests": row[keep]}))
    return pd.concat(parts, ignore_index=True)


def noisy_panel(days: float = 8, seed: int = 0, sd: float = 0.4, start: str = "2025-01-06") -> Panel:
    """Clients whose 10-minute counts scatter widely around a daily cycle (lognormal, ``sd``): the
    level is what can be forecast, and persistence and last day's bin repeat the scatter (the fleet
    model beat both by 16-25% on seeds 0-2 here, enough for a verdict that does not flip)."""
    idx = pd.date_range(start, periods=int(days * 144), freq="10min")
    rng = np.random.default_rng(seed)
    mod = (idx.hour * 60 + idx.minute).to_numpy()
    rows, names, groups = [], [], []
    for i, (g, lv) in enumerate([("a", 50), ("a", 400), ("a", 120), ("b", 30), ("b", 900), ("b", 200)]):
        rate = lv * (1 + 0.5 * np.sin(2 * np.pi * (mod - 480 - 90 * i) / 1440)) * rng.lognormal(0, sd, len(idx))
        rows.append(rng.poisson(rate).astype(float))
        names.append(f"{g}/c{i}")
        groups.append(g)
    return Panel(tuple(names), idx, np.vstack(rows), 10, tuple(groups))
