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

MAX_COUNT = 1e9  # requests in one interval


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
    """Any timestamp column to int64 ns since the epoch, UTC; NaT -> INT64 min."""
    if preset.time_unit != "datetime":
        scale = 1e9 if preset.time_unit == "s" else 1e6
        vals = _numbers(arr)
        ns = np.where(np.isfinite(vals), vals * scale, np.nan)
        return np.where(np.isfinite(ns), ns + epoch_ns, np.iinfo(np.int64).min).astype(np.int64)
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
    out = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns, UTC]")
    aware = pd.to_datetime(text[has_offset], format="ISO8601", errors="coerce", utc=True)
    naive = pd.to_datetime(text[~has_offset], format="ISO8601", errors="coerce")
    out[has_offset] = aware
    out[~has_offset] = naive.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT").dt.tz_convert("UTC")
    return _utc_ns(out)


def _utc_ns(s: pd.Series) -> np.ndarray:
    if getattr(s.dt, "tz", None) is not None:
        s = s.dt.tz_convert("UTC").dt.tz_localize(None)
    nat = s.isna().to_numpy()
    ns = s.astype("datetime64[ns]").to_numpy().astype(np.int64)
    ns[nat] = np.iinfo(np.int64).min
    return ns


def _check(values: np.ndarray, raw: pa.Array, name: str, upper: float, bad: list, allow_blank: bool) -> np.ndarray:
    """Flag empty, non-numeric, negative or absurd values; return the 'blank' mask."""
    blank = raw.is_null().to_numpy(zero_copy_only=False) if allow_blank else np.zeros(len(values), bool)
    wrong = ~np.isfinite(values) & ~blank
    wrong |= np.isfinite(values) & ((values < 0) | (values > upper))
    for i in np.flatnonzero(wrong)[:1000]:
        v = raw[int(i)].as_py()
        why = "empty" if v is None else "not a number" if not np.isfinite(values[i]) else \
            "negative" if values[i] < 0 else f"absurd (above {upper:,.0f})"
        bad.append((int(i), name, why, v))
    if wrong.sum() > 1000:  # keep memory bounded; the rows are still rejected
        bad.extend((int(i), name, "invalid", "") for i in np.flatnonzero(wrong)[1000:])
    return blank


def parse_chunk(chunk: Chunk, preset: Preset, tz: str, epoch_ns: int) -> Parsed:
    bad: list[tuple[int, str, str, str]] = []
    if "__bad__" in chunk.columns:
        for i in np.flatnonzero(~chunk.columns["__bad__"].is_null().to_numpy(zero_copy_only=False)):
            bad.append((int(i), "(line)", "not valid JSON", ""))
    ns = parse_times(chunk.columns[preset.time], preset, tz, epoch_ns)
    for i in np.flatnonzero(ns == np.iinfo(np.int64).min):
        bad.append((int(i), preset.time, "not a timestamp", chunk.columns[preset.time][int(i)].as_py()))
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
        _check(inp, chunk.columns[preset.input], preset.input, MAX_TOKENS, bad, allow_blank=preset.kind == "counts")
    if preset.output:
        out = _numbers(chunk.columns[preset.output])
        _check(out, chunk.columns[preset.output], preset.output, MAX_TOKENS, bad, allow_blank=preset.kind == "counts")
    return Parsed(ns, count, inp, out, bad, blank)
