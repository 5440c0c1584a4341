"""Capacity plan for planners: replicas needed per hour for the next day or week.

A pure function of a per-minute load history (and optionally the latest short-range
forecast): no clock, no I/O.  Method, so a planner can check it by hand:

1. Seasonal profile.  For each future hour, take the per-minute loads of the same
   hour in the history: same hour of the week when the history holds at least two
   weeks (weekday/weekend differ), else the same hour of the day.  Only the most
   recent ``lookback_periods`` weeks (or days) count, so an old regime fades out.
2. Level.  Recent periods are weighted more (weight halves every ``half_life``
   periods): demand at level ``quantile`` is the weighted quantile of those minutes,
   so P90 means "90% of the minutes of that hour are covered".
3. Near term.  Hours that the short-range forecast covers use the larger of the
   profile and the forecast's quantile path (the forecast knows about today).
4. Capacity per instance.  Given a core configuration (``CapacityRequest.core``), the
   capacity of the profile the schedule makes active at each minute of the hour (the
   core's profile stage, ``warmup.core.plan.stage_profile``, as in the replica plan); an
   hour a window starts or ends in takes the smaller one, as its busiest minute needs.
   Without one, ``capacity_per_instance`` for every hour.
5. Replicas = ceil(demand / (capacity * utilisation)), within
   [min_replicas, max_replicas]; GPU-hours = replicas * gpus_per_replica per hour.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, Optional, Sequence

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmcast.resolution import resolution_of
from warmup.core import CoreConfig, replicas_for
from warmup.core.plan import stage_profile

Span = Literal["day", "week"]


@dataclass(frozen=True)
class CapacityRequest:
    start: pd.Timestamp                  # first hour planned (floored to the hour)
    span: Span = "day"
    quantile: float = 0.9
    utilisation: float = 0.8
    capacity_per_instance: float = 300.0  # requests/min one instance serves at 100%
    gpus_per_replica: int = 1
    min_replicas: int = 0
    max_replicas: int | None = None
    lookback_periods: int = 4
    half_life: float = 2.0
    core: Optional[CoreConfig] = None    # profiles and schedule: capacity per minute (step 4)

    def check(self) -> None:
        if self.span not in ("day", "week"):
            raise InputError(f"span must be 'day' or 'week', not {self.span!r}")
        if not 0 < self.quantile < 1:
            raise InputError(f"quantile must be in (0, 1), not {self.quantile}")
        if not 0.01 <= self.utilisation <= 1:
            raise InputError(f"utilisation must be in [0.01, 1], not {self.utilisation}")
        if not self.capacity_per_instance >= 0.001:
            raise InputError(f"capacity_per_instance must be >= 0.001 requests/min, not {self.capacity_per_instance}")
        if self.gpus_per_replica < 0 or self.min_replicas < 0:
            raise InputError("gpus_per_replica and min_replicas must be >= 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise InputError(f"max_replicas {self.max_replicas} < min_replicas {self.min_replicas}")


@dataclass(frozen=True)
class HourPlan:
    start: pd.Timestamp
    demand_p50_rpm: float
    demand_rpm: float          # at the requested quantile
    replicas: int
    gpu_hours: float
    source: str                # "profile" | "forecast" | "no-history"
    capacity_rpm: float = 0.0  # per instance, the hour's (step 4)
    profile: str = ""          # the profile(s) active in the hour, "+"-joined in order; "" without a core config


@dataclass(frozen=True)
class CapacityPlan:
    request: CapacityRequest
    hours: list[HourPlan]
    method: str
    history_minutes: int
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return float(sum(h.gpu_hours for h in self.hours))

    @property
    def peak_replicas(self) -> int:
        return max((h.replicas for h in self.hours), default=0)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w) - 0.5 * w
    return float(np.interp(q * w.sum(), cum, v))


def _replicas(rpm: float, cap: float, req: CapacityRequest) -> int:
    n = replicas_for(rpm, cap, req.utilisation)
    n = max(n, req.min_replicas)
    return n if req.max_replicas is None else min(n, req.max_replicas)


def hour_capacity(req: CapacityRequest, slot: pd.Timestamp) -> tuple[float, str]:
    """(capacity per instance, profiles) for the hour from ``slot`` (naive UTC): the lowest capacity
    of the profiles the core's profile stage makes active at its minutes."""
    if req.core is None:
        return req.capacity_per_instance, ""
    t0 = slot.tz_localize("UTC").to_pydatetime()
    caps: dict[str, float] = {}  # in order of first activity in the hour
    for m in range(60):
        name, cap, _ = stage_profile(req.core, t0 + timedelta(minutes=m))
        caps.setdefault(name, cap)
    return min(caps.values()), "+".join(caps)


def _slot_samples(hist: pd.Series, slot_start: pd.Timestamp, period: pd.Timedelta,
                  req: CapacityRequest) -> tuple[np.ndarray, np.ndarray]:
    """Minute values of the same hour in the last ``lookback_periods`` periods, with recency weights."""
    vals, wts = [], []
    end = hist.index[-1]
    k = 1
    found = 0
    # Walk back one period at a time from the planned hour until enough periods are found.
    while found < req.lookback_periods:
        lo = slot_start - k * period
        if lo + pd.Timedelta(hours=1) <= hist.index[0]:
            break
        if lo <= end:
            seg = hist.loc[lo: lo + pd.Timedelta(minutes=59)].to_numpy(float)
            seg = seg[np.isfinite(seg)]
            if len(seg):
                vals.append(seg)
                wts.append(np.full(len(seg), 0.5 ** (found / req.half_life)))
                found += 1
        k += 1
    if not vals:
        return np.array([]), np.array([])
    return np.concatenate(vals), np.concatenate(wts)


def _forecast_hours(fc_index: pd.DatetimeIndex | None, fc_path: Sequence[float] | None) -> dict[pd.Timestamp, float]:
    if fc_index is None or fc_path is None or len(fc_path) == 0:
        return {}
    s = pd.Series(np.asarray(fc_path, float), index=fc_index)
    s = s[np.isfinite(s.to_numpy())]
    return {pd.Timestamp(h): float(v) for h, v in s.groupby(s.index.floor("h")).max().items()}


def _days_covered(history: pd.Series, hist: pd.Series) -> float:
    """Days from the first bin's start to the last bin's end (a bin is a minute, or the series' width)."""
    if not len(hist):
        return 0.0
    width = pd.Timedelta(minutes=resolution_of(history))
    return (hist.index[-1] + width - hist.index[0]).total_seconds() / 86400


def _history_notes(minutes: int, observed_days: float, weekly: bool) -> list[str]:
    if minutes == 0:
        return ["no stored history: only the forecast (if any) and min_replicas inform the plan"]
    if weekly:
        return []
    # floored, never rounded up: "14.0 days ... needs 14" read as a contradiction (issue 32)
    return [f"{math.floor(observed_days * 10) / 10:.1f} days of history: weekly pattern not used (needs 14 days)"]


def capacity_plan(history: pd.Series, req: CapacityRequest,
                  forecast_index: pd.DatetimeIndex | None = None,
                  forecast_path: Sequence[float] | None = None,
                  forecast_p50: Sequence[float] | None = None) -> CapacityPlan:
    """Replicas per hour for ``req.span`` from ``req.start`` (see the module doc)."""
    req.check()
    hist = history.astype(float)
    if not isinstance(hist.index, pd.DatetimeIndex):
        raise InputError("history needs a DatetimeIndex of minutes")
    hist = hist[np.isfinite(hist.to_numpy())]
    start = pd.Timestamp(req.start).floor("h")
    n_hours = 24 if req.span == "day" else 168
    observed_days = _days_covered(history, hist)
    weekly = observed_days >= 14
    period = pd.Timedelta(days=7 if weekly else 1)
    method = (f"same hour of the {'week' if weekly else 'day'} over the last {req.lookback_periods} "
              f"{'weeks' if weekly else 'days'} (recency half-life {req.half_life:g}), "
              f"P{round(req.quantile * 100)} of per-minute load")
    notes = _history_notes(len(hist), observed_days, weekly)
    fc_q = _forecast_hours(forecast_index, forecast_path)
    fc_50 = _forecast_hours(forecast_index, forecast_p50)
    hours = []
    for h in range(n_hours):
        slot = start + pd.Timedelta(hours=h)
        vals, wts = _slot_samples(hist, slot, period, req) if len(hist) else (np.array([]), np.array([]))
        if len(vals):
            p50, dq, source = (_weighted_quantile(vals, wts, 0.5), _weighted_quantile(vals, wts, req.quantile),
                               "profile")
        else:
            p50, dq, source = 0.0, 0.0, "no-history"
        if slot in fc_q and fc_q[slot] > dq:
            dq, source = fc_q[slot], "forecast"
            p50 = max(p50, fc_50.get(slot, p50))
        cap, profile = hour_capacity(req, slot)
        n = _replicas(dq, cap, req)
        hours.append(HourPlan(slot, round(p50, 3), round(dq, 3), n, float(n * req.gpus_per_replica), source,
                              cap, profile))
    return CapacityPlan(req, hours, method, int(len(hist)), notes)
