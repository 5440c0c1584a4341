"""A multi-series file read as a panel: one series per client (tenant, API key) and deployment.

A count file (time, series column(s), requests) or a per-request log (time, series column(s): one
row a request, counted per minute).  The key of a series is its ``--series-col`` values joined
with '/'; a file with a ``deployment`` or ``model`` column keeps each client under its deployment
(ServeGen's client names repeat across model services: chunk-0 of m-mid is not chunk-0 of
deepseek-r1), and that column is the series' group, so deployment totals can be formed.

Bad input is an :class:`~warmcast.errors.InputError` naming the file, and the line and column
where a row is at fault.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from forecaster.global_lstm.panel import Panel
from warmcast.errors import InputError

DEPLOYMENT_COLUMNS = ("deployment", "model")
SEP = "/"


@dataclass(frozen=True)
class PanelFile:
    panel: Panel
    series_cols: tuple[str, ...]  # the columns the keys are made of (a deployment column first, if any)
    note: str                     # how the file was read, for the console


def _columns(frame: pd.DataFrame, path: Path, series: Sequence[str], time_col: str | None,
             count_col: str | None) -> tuple[list[str], str, str | None]:
    cols = list(frame.columns)
    for c in series:
        if c not in cols:
            raise InputError(f"{path}: no column {c!r} for --series-col (columns: {', '.join(cols)})")
    time_col = time_col or next((c for c in ("time", "timestamp", "TIMESTAMP") if c in cols), None)
    if time_col is None or time_col not in cols:
        raise InputError(f"{path}: no time column {time_col or 'time'!r} (columns: {', '.join(cols)}); "
                         "name it with --time-col")
    if count_col is not None and count_col not in cols:
        raise InputError(f"{path}: no column {count_col!r} for --count-col (columns: {', '.join(cols)})")
    if count_col is None and "requests" in cols:
        count_col = "requests"
    keys = list(series)
    dep = next((c for c in DEPLOYMENT_COLUMNS if c in cols and c not in keys), None)
    if dep is not None and dep != count_col and dep != time_col:
        keys = [dep, *keys]
    return keys, time_col, count_col


def _times(frame: pd.DataFrame, path: Path, col: str, tz: str, unit: str | None) -> pd.Series:
    if unit in ("s", "ms"):  # epoch numbers (--time-unit)
        t = pd.to_datetime(pd.to_numeric(frame[col], errors="coerce"), unit=unit, errors="coerce")
    else:
        t = pd.to_datetime(frame[col], errors="coerce")  # one format, inferred: fast on a million rows
    if t.isna().any() and unit not in ("s", "ms"):  # stamps of several formats: each row on its own (slow, rare)
        t = pd.to_datetime(frame[col], errors="coerce", format="mixed")
    bad = np.flatnonzero(t.isna().to_numpy())
    if len(bad):
        raise InputError(f"{path}: line {bad[0] + 2}, column {col!r}: {frame[col].iloc[bad[0]]!r} is not a time")
    if getattr(t.dt, "tz", None) is None:
        t = t.dt.tz_localize(tz)
    return t.dt.tz_convert("UTC").dt.tz_localize(None)


def _counts(frame: pd.DataFrame, path: Path, col: str | None) -> np.ndarray:
    if col is None:
        return np.ones(len(frame))  # a request log: each row one request
    v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(v) | (v < 0))
    if len(bad):
        raise InputError(f"{path}: line {bad[0] + 2}, column {col!r}: {frame[col].iloc[bad[0]]!r} is not a "
                         "count (a number >= 0)")
    return v


@dataclass(frozen=True)
class LongFile:
    """A multi-series file as one row per (series, step): ``series``, ``time``, ``requests``, ``group``."""

    long: pd.DataFrame
    keys: tuple[str, ...]     # the columns the series keys are made of
    step_min: int | None      # 1 for a per-request log (counted per minute), else None: the table's own
    how: str


def read_long(path: str | Path, series_cols: Sequence[str], time_col: str | None = None,
              count_col: str | None = None, tz: str = "UTC", time_unit: str | None = None) -> LongFile:
    """Every row of a CSV file (plain or compressed) with its series key, time and count, checked."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--log {path} does not exist")
    series_cols = [c.strip() for c in series_cols if c.strip()]
    if not series_cols:
        raise InputError("--series-col names no column")
    try:
        header = list(pd.read_csv(path, nrows=0).columns)
        # names as written ("007" stays "007"); a column the file lacks is refused below, by name
        frame = pd.read_csv(path, dtype={c: str for c in series_cols if c in header}, keep_default_na=False,
                            na_values=[""])
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not a readable CSV file ({err})") from None
    if len(frame) == 0:
        raise InputError(f"{path}: no rows")
    keys, time_col, count_col = _columns(frame, path, series_cols, time_col, count_col)
    times = _times(frame, path, time_col, tz, time_unit)
    counts = _counts(frame, path, count_col)
    step = None
    if count_col is None:  # per-request rows: counted per minute
        times = times.dt.floor("min")
        step = 1
    key = frame[keys[0]].astype(str)
    for c in keys[1:]:
        key = key + SEP + frame[c].astype(str)
    long = pd.DataFrame({"series": key.to_numpy(), "time": times.to_numpy(), "requests": counts,
                         "group": frame[keys[0]].astype(str).to_numpy()})
    return LongFile(long, tuple(keys), step, "counts per row" if count_col else "one request per row, counted per minute")


def load_panel(path: str | Path, series_cols: Sequence[str], time_col: str | None = None,
               count_col: str | None = None, tz: str = "UTC", time_unit: str | None = None) -> PanelFile:
    """Every series of a CSV file (plain or compressed) as a panel on one grid."""
    read = read_long(path, series_cols, time_col, count_col, tz, time_unit)
    keys = read.keys
    panel = Panel.from_long(read.long, "series", "time", "requests", group="group" if len(keys) > 1 else None,
                            step_min=read.step_min)
    note = (f"{path}: {len(panel)} series ({SEP.join(keys)}), {len(panel.index)} steps of {panel.step_min} min, "
            f"{read.how}")
    return PanelFile(panel, tuple(keys), note)
