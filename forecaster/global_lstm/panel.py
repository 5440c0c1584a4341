"""A panel: many count series on one regular time grid, one row each (the fleet model's input).

Rows are series (a deployment's clients, or the deployments themselves), columns the grid's
steps; NaN marks a missing step, as everywhere in warmcast.  ``groups`` names each row's
deployment where the series form a hierarchy (clients under their model service), so totals can
be added (:meth:`Panel.with_totals`) and forecasts reconciled (:mod:`forecaster.global_lstm.reconcile`).

Why a matrix and not a dict of Series: every step of the fleet model -- outage rule, scaling,
features, the forward pass -- then runs once over all rows with numpy (a 1,000-series forecast is
one call, not a thousand), and a series' history is a row slice, never a pandas lookup.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from forecaster.base import InsufficientHistory, minute_series, resolution
from warmcast.resolution import with_resolution

TOTAL = "total"  # name of a deployment's total row: "<deployment>/total"


@dataclass(frozen=True)
class Panel:
    """``values[i]`` is series ``names[i]`` on ``index`` (regular, ``step_min`` minutes apart)."""

    names: tuple[str, ...]
    index: pd.DatetimeIndex
    values: np.ndarray  # (n_series, n_steps) float64, NaN = missing
    step_min: int
    groups: tuple[str, ...] | None = None  # each series' deployment (None: a flat set of series)

    def __post_init__(self) -> None:
        if self.values.shape != (len(self.names), len(self.index)):
            raise ValueError(f"panel values {self.values.shape} do not match {len(self.names)} names "
                             f"x {len(self.index)} steps")
        if len(set(self.names)) != len(self.names):
            raise ValueError("panel series names must be unique")
        if self.groups is not None and len(self.groups) != len(self.names):
            raise ValueError("panel groups must name one deployment per series")

    def __len__(self) -> int:
        return len(self.names)

    # ------------------------------------------------------------ building
    @classmethod
    def from_series(cls, series: Mapping[str, pd.Series | pd.DataFrame],
                    groups: Mapping[str, str] | None = None) -> "Panel":
        """Series of one resolution put on the union of their grids (a step one series lacks is NaN)."""
        if not series:
            raise InsufficientHistory("no series given")
        parts = {str(k): minute_series(v) for k, v in series.items()}
        parts = {k: s for k, s in parts.items() if len(s)}
        if not parts:
            raise InsufficientHistory("every series given is empty")
        steps = sorted({resolution(s) for s in parts.values()})
        if len(steps) > 1:
            raise ValueError(f"the series have different resolutions ({steps} minutes); one panel has one step")
        step = steps[0]
        start = min(s.index[0] for s in parts.values())
        end = max(s.index[-1] for s in parts.values())
        index = pd.date_range(start, end, freq=f"{step}min")
        values = np.vstack([s.reindex(index).to_numpy(dtype=float) for s in parts.values()])
        names = tuple(parts)
        return cls(names, index, values, step, None if groups is None else tuple(groups[n] for n in names))

    @classmethod
    def from_long(cls, frame: pd.DataFrame, series: str, time: str = "time", count: str = "requests",
                  group: str | None = None, step_min: int | None = None) -> "Panel":
        """A long table (one row per series and step) as a panel.  A step a series has no row for,
        inside its deployment's span (``group``'s first to last row; the table's without groups), had
        no requests (a count log lists only the steps with load), so it is 0, not missing: the
        clients then sum to their deployment.  Outside that span it is missing: ServeGen's file holds
        deepseek-r1 and mm-image on its first day only, and 13 days of zeros after it would be load
        that never was.  ``step_min`` None: the smallest gap between the table's times."""
        times = pd.DatetimeIndex(pd.to_datetime(frame[time])).as_unit("ns")
        uniq = np.unique(times.asi8)
        if step_min is None:
            gaps = np.diff(uniq)
            step_min = max(1, int(gaps.min() // 60_000_000_000)) if len(gaps) else 1
        index = pd.date_range(pd.Timestamp(uniq[0]), pd.Timestamp(uniq[-1]), freq=f"{step_min}min")
        keys, pos = np.unique(frame[series].astype(str).to_numpy(), return_inverse=True)
        col = ((times.asi8 - index[0].value) // (step_min * 60_000_000_000)).astype(np.int64)
        values = np.zeros((len(keys), len(index)))
        np.add.at(values, (pos, col), frame[count].to_numpy(dtype=float))
        groups = None
        if group is not None:
            g = pd.Series(frame[group].astype(str).to_numpy())
            first = g.groupby(pos).first()
            groups = tuple(first.loc[i] for i in range(len(keys)))
            span = pd.Series(col).groupby(g.to_numpy()).agg(["min", "max"])  # each deployment's first and last step
            steps = np.arange(len(index))
            for i, d in enumerate(groups):
                values[i, (steps < span.at[d, "min"]) | (steps > span.at[d, "max"])] = np.nan
        return cls(tuple(keys), index, values, step_min, groups)

    # ------------------------------------------------------------ views
    def before(self, t: pd.Timestamp) -> "Panel":
        """The steps strictly before ``t`` (a model fitted on it has seen nothing at or after ``t``)."""
        n = int(self.index.searchsorted(pd.Timestamp(t), side="left"))
        return replace(self, index=self.index[:n], values=self.values[:, :n])

    def select(self, keep: Sequence[bool] | np.ndarray) -> "Panel":
        """The rows where ``keep`` is true."""
        keep = np.asarray(keep, dtype=bool)
        return replace(self, names=tuple(np.asarray(self.names, dtype=object)[keep]), values=self.values[keep],
                       groups=None if self.groups is None else tuple(np.asarray(self.groups, dtype=object)[keep]))

    def row(self, name: str) -> int:
        return self.names.index(name)

    def frame(self, i: int) -> pd.DataFrame:
        """Series ``i`` as a requests frame at the panel's resolution (what a per-series model reads)."""
        f = pd.DataFrame({"requests": self.values[i]}, index=self.index.copy())
        f.index.name = "time"
        return with_resolution(f, self.step_min)

    def with_totals(self) -> "Panel":
        """The panel with one more row per deployment, ``<deployment>/total``: the sum of its series
        (NaN only where every one of them is missing)."""
        if self.groups is None:
            raise ValueError("a panel without groups has no deployment totals")
        order = list(dict.fromkeys(self.groups))
        g = np.asarray(self.groups, dtype=object)
        rows = []
        for d in order:
            block = self.values[g == d]
            total = np.nansum(block, axis=0)
            rows.append(np.where(np.isnan(block).all(axis=0), np.nan, total))
        return Panel(self.names + tuple(f"{d}/{TOTAL}" for d in order), self.index,
                     np.vstack([self.values, *rows]), self.step_min, self.groups + tuple(order))

    def hierarchy(self) -> dict[str, tuple[int, list[int]]]:
        """Per deployment with a total row: (its total's row, its series' rows)."""
        if self.groups is None:
            return {}
        out = {}
        for d in dict.fromkeys(self.groups):
            name = f"{d}/{TOTAL}"
            if name in self.names:
                out[d] = (self.row(name), [i for i, (n, g) in enumerate(zip(self.names, self.groups))
                                           if g == d and n != name])
        return out
