"""Raw columns to numbers: timestamps to UTC nanoseconds, counts and tokens checked."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from warmcast.ingest.accumulate import MAX_TOKENS
from warmcast.ingest.formats import Preset
from warmcast.ingest.readers import Chunk
from warmcast.ingest.window import TimeWindow

MAX_COUNT = 1e9  # requests in one interval
NAT = np.iinfo(np.int64).min  # not a timestamp
# Times pandas cannot hold in nanoseconds are clipped to these, so the time window refuses them.
TOO_LATE = np.iinfo(np.int64).max
TOO_EARLY = NAT + 1


@dataclass
class Parsed:
    """One chunk turned into numbers; ``bad`` holds (row, column, reason, value) per rejected row."""

    ns: np.ndarray
    count: np.ndarray
    inp: np.ndarray | None
    out: np.ndarray | None
    bad: list[tuple[int, str, str, str]]
    blank: np.ndarray  # counts rows with an empty value: a missing interval, not an error


def _numbers(arr: pa.Array) -> np.ndarray:
    """Strings to float64; unparseable or empty values become NaN (checked by the caller)."""
    if pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type):
        return arr.to_numpy(zero_copy_only=False).astype(float)
    try:
        return pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:  # slow path only when something does not parse
        return pd.to_numeric(pd.Series(arr.to_pylist(), dtype=object), errors="coerce").to_numpy(float)


def parse_times(arr: pa.Array, preset: Preset, tz: str, epoch_ns: int) -> np.ndarray:
    """Any timestamp column to int64 ns since the epoch, UTC; NAT where it does not parse,
    TOO_LATE / TOO_EARLY where it parses but lies outside what nanoseconds hold."""
    if preset.time_unit != "datetime":
        scale = 1e9 if preset.time_unit == "s" else 1e6
        ns = _numbers(arr) * scale + epoch_ns
        with np.errstate(invalid="ignore"):
            out = np.where(np.isfinite(ns), np.clip(ns, -9.2e18, 9.2e18), 0).astype(np.int64)
        out[ns >= 9.2e18] = TOO_LATE
        out[ns <= -9.2e18] = TOO_EARLY
        out[np.isnan(ns)] = NAT
        return out
    if pa.types.is_timestamp(arr.type):
        s = pd.Series(arr.to_pandas())
        s = s.dt.tz_localize(tz) if s.dt.tz is None else s
        return _utc_ns(s.dt.tz_convert("UTC"))
    for target in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
        try:
            cast = pc.cast(arr, target)
        except pa.ArrowInvalid:
            continue
        s = pd.Series(cast.to_pandas())
        if target.tz is None and tz != "UTC":
            s = s.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT").dt.tz_convert("UTC")
        return _utc_ns(s)
    return _mixed_times(pd.Series(arr.to_pylist(), dtype=object), tz)


def _mixed_times(raw: pd.Series, tz: str) -> np.ndarray:
    """Slow path for mixed or odd formats: rows with an offset are converted, rows without
    one are read in ``tz``; what does not parse becomes NaT and is reported as bad."""
    text = raw.astype(str)
    has_offset = text.str.contains(r"(?:[+-]\d\d:?\d\d|Z)$", regex=True) & raw.notna()
    aware = pd.to_datetime(text[has_offset], format="ISO8601", errors="coerce", utc=True)
    naive = pd.to_datetime(text[~has_offset], format="ISO8601", errors="coerce")
    naive = naive.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT").dt.tz_convert("UTC")
    out = np.full(len(raw), NAT, np.int64)
    out[has_offset.to_numpy()] = _utc_ns(aware)
    out[~has_offset.to_numpy()] = _utc_ns(naive)
    return out


def _utc_ns(s: pd.Series) -> np.ndarray:
    """Nanoseconds of a datetime series at any resolution, without pandas' overflow error
    (a year-9999 time read at microsecond resolution does not fit in nanoseconds)."""
    if getattr(s.dt, "tz", None) is not None:
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
    vals = s.to_numpy()
    unit, _ = np.datetime_data(vals.dtype)
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
    raw = vals.astype(np.int64)
    nat = np.isnat(vals)
    out = raw * per if per == 1 else np.clip(raw, NAT // per + 1, TOO_LATE // per) * per
    out[raw > TOO_LATE // per] = TOO_LATE
    out[raw < NAT // per + 1] = TOO_EARLY
    out[nat] = NAT
    return out


def _check(values: np.ndarray, raw: pa.Array, name: str, upper: float, bad: list, allow_blank: bool,
           whole: bool = False) -> np.ndarray:
    """Flag empty, non-numeric, negative or absurd values, and with ``whole`` fractions (a token count
    of 12.5 is no count: issue 41); return the 'blank' mask."""
    blank = raw.is_null().to_numpy(zero_copy_only=False) if allow_blank else np.zeros(len(values), bool)
    wrong = ~np.isfinite(values) & ~blank
    wrong |= np.isfinite(values) & ((values < 0) | (values > upper))
    if whole:
        wrong |= np.isfinite(values) & (values != np.floor(values))
    for i in np.flatnonzero(wrong)[:1000]:
        v = raw[int(i)].as_py()
        why = "empty" if v is None else "not a number" if not np.isfinite(values[i]) else \
            "negative" if values[i] < 0 else f"absurd (above {upper:,.0f})" if values[i] > upper else \
            "not a whole number (a token count)"
        bad.append((int(i), name, why, v))
    if wrong.sum() > 1000:  # keep memory bounded; the rows are still rejected
        bad.extend((int(i), name, "invalid", "") for i in np.flatnonzero(wrong)[1000:])
    return blank


def _check_times(ns: np.ndarray, raw: pa.Array, name: str, window: TimeWindow | None, bad: list) -> None:
    """Flag times that do not parse and, given a window, times it refuses."""
    wrong = ns == NAT
    for i in np.flatnonzero(wrong)[:1000]:
        bad.append((int(i), name, "not a timestamp", raw[int(i)].as_py()))
    if window is None:
        return
    outside = window.outside(ns) & ~wrong
    for i in np.flatnonzero(outside)[:1000]:
        bad.append((int(i), name, window.why(int(ns[i])), raw[int(i)].as_py()))
    if outside.sum() > 1000:  # keep memory bounded; the rows are still rejected
        bad.extend((int(i), name, "outside the time window", "") for i in np.flatnonzero(outside)[1000:])


def parse_chunk(chunk: Chunk, preset: Preset, tz: str, epoch_ns: int, window: TimeWindow | None = None) -> Parsed:
    bad: list[tuple[int, str, str, str]] = []
    if "__bad__" in chunk.columns:
        reasons = chunk.columns["__bad__"]
        for i in np.flatnonzero(~reasons.is_null().to_numpy(zero_copy_only=False)):
            bad.append((int(i), "(line)", reasons[int(i)].as_py(), ""))
    ns = parse_times(chunk.columns[preset.time], preset, tz, epoch_ns)
    _check_times(ns, chunk.columns[preset.time], preset.time, window, bad)
    n = len(ns)
    blank = np.zeros(n, bool)
    if preset.kind == "counts":
        count = _numbers(chunk.columns[preset.count])
        blank = _check(count, chunk.columns[preset.count], preset.count, MAX_COUNT, bad, allow_blank=True)
    else:
        count = np.ones(n)
    inp = out = None
    if preset.input:
        inp = _numbers(chunk.columns[preset.input])
        _check(inp, chunk.columns[preset.input], preset.input, MAX_TOKENS, bad, allow_blank=preset.kind == "counts",
               whole=True)
    if preset.output:
        out = _numbers(chunk.columns[preset.output])
        _check(out, chunk.columns[preset.output], preset.output, MAX_TOKENS, bad, allow_blank=preset.kind == "counts",
               whole=True)
    return Parsed(ns, count, inp, out, bad, blank)
