"""A load series' resolution: the length of one bin, in whole minutes.

Most series are per minute.  A count series exported at a coarser interval (5-minute
request counts from a load balancer, 10-minute counts from a trace) keeps that interval:
it is stored, forecast and simulated in its own bins, never spread over minutes as if
each minute had been observed.  A value is the requests in one bin; it is shown per
minute only as a rate, and then labelled so (:func:`rate_label`).

A series carries its resolution in ``attrs["resolution_min"]`` where the load store or
ingest made it; otherwise it is read from its index (:func:`resolution_of`).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

NS_PER_MIN = 60_000_000_000
ATTR = "resolution_min"


def valid_resolution(step_ns: int) -> int:
    """The resolution in minutes of bins ``step_ns`` apart: 1 unless the step is a whole number
    of minutes that divides a day (bins then line up with days, hours and weeks)."""
    if step_ns <= NS_PER_MIN or step_ns % NS_PER_MIN:
        return 1
    minutes = step_ns // NS_PER_MIN
    return int(minutes) if 1440 % minutes == 0 else 1


def grid_step_ns(ns: np.ndarray, previous: int = 0) -> int:
    """Greatest common divisor of the gaps between distinct times ``ns`` (and ``previous``, a
    step seen before): the grid every time lies on; 0 with fewer than two times."""
    ns = np.asarray(ns)
    ordered = len(ns) > 1 and bool(np.all(ns[1:] > ns[:-1]))  # a series' index: sorting it again costs 2 ms
    steps = np.diff(ns) if ordered else np.diff(np.unique(ns))
    if not len(steps):
        g = 0
    elif steps[0] > 0 and bool(np.all(steps == steps[0])):  # a regular grid: its one gap
        g = int(steps[0])
    else:
        g = int(np.gcd.reduce(steps))
    return math.gcd(g, int(previous))


def resolution_of(obj: pd.Series | pd.DataFrame | pd.DatetimeIndex) -> int:
    """Minutes per bin of a series or frame: its ``attrs`` where set, else its index's grid."""
    attrs = getattr(obj, "attrs", None) or {}
    if ATTR in attrs:
        return int(attrs[ATTR])
    index = obj if isinstance(obj, pd.DatetimeIndex) else obj.index
    if not isinstance(index, pd.DatetimeIndex) or len(index) < 2:
        return 1
    return valid_resolution(grid_step_ns(index.as_unit("ns").asi8))


def with_resolution(obj, minutes: int):
    """``obj`` marked with its resolution (where coarser than a minute; 1 leaves it as it was)."""
    if minutes != 1:
        obj.attrs[ATTR] = int(minutes)
    return obj


def step(minutes: int) -> pd.Timedelta:
    return pd.Timedelta(minutes=minutes)


def bin_label(minutes: int) -> str:
    """What one value is: 'requests/min', or 'requests per 5 min'."""
    return "requests/min" if minutes == 1 else f"requests per {minutes} min"


def rate_label(minutes: int) -> str:
    """A per-minute rate computed from bins, labelled as such."""
    return "requests/min" if minutes == 1 else f"requests/min (rate, from {minutes}-min bins)"


def steps_for(minutes: float, resolution: int) -> int:
    """Whole bins covering ``minutes`` (at least one): a 30-minute horizon is 6 steps at 5 min."""
    return max(1, int(math.ceil(minutes / resolution)))
