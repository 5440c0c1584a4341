"""Request-log ingestion: any supported log in, per-minute load series out.

Per-request logs (CSV, JSONL or Parquet; presets for the Azure LLM trace, the
Mooncake trace, OpenAI/vLLM-style access logs and warmcast's own generator) and
per-interval count series (``time,requests`` at any interval) are read in chunks
of ``chunk_rows`` and folded into a :class:`MinuteAccumulator`, so memory grows
with the number of minutes covered, never with the number of rows.

Nothing here talks to Redis: :func:`aggregate_file` returns the per-minute frame
and an :class:`IngestReport`; ``warmcast.store`` writes the frame atomically.

Signals per minute: ``requests``, ``input_tokens``, ``output_tokens``,
``ctx_mean`` (mean input tokens per request) and ``ctx_p95`` (95th percentile of
input tokens, from a log-spaced histogram: within about 5% of the exact value).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from warmcast.errors import InputError

Format = Literal["azure", "mooncake", "openai", "counts", "warmcast", "auto"]
OnError = Literal["fail", "skip"]
SIGNALS = ("requests", "input_tokens", "output_tokens", "ctx_mean", "ctx_p95")
MAX_TOKENS = 10_000_000  # a single request above this is not a real request
MAX_COUNT = 1e9  # requests in one interval
CHUNK_ROWS = 1_000_000


@dataclass(frozen=True)
class Preset:
    """Where a log keeps its fields. ``kind`` says whether a row is a request or an interval."""

    kind: Literal["requests", "counts"]
    time: str
    time_unit: Literal["datetime", "s", "ms"] = "datetime"
    input: str | None = None
    output: str | None = None
    count: str | None = None


PRESETS: dict[str, Preset] = {
    "azure": Preset("requests", "TIMESTAMP", input="ContextTokens", output="GeneratedTokens"),
    "mooncake": Preset("requests", "timestamp", "ms", input="input_length", output="output_length"),
    # OpenAI response objects / vLLM access logs: created (unix s) and usage counts.
    "openai": Preset("requests", "created", "s", input="usage.prompt_tokens", output="usage.completion_tokens"),
    "warmcast": Preset("requests", "timestamp", input="input_tokens", output="output_tokens"),
    "counts": Preset("counts", "time", count="requests"),
}


@dataclass
class IngestReport:
    """What an ingest read, kept, skipped and noticed; printed by the CLI."""

    files: list[str] = field(default_factory=list)
    format: str = ""
    rows: int = 0
    requests: float = 0.0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    minutes: int = 0
    skipped: int = 0
    blank_intervals: int = 0
    out_of_order: int = 0
    duplicate_times: int = 0
    first: pd.Timestamp | None = None
    last: pd.Timestamp | None = None
    problems: list[str] = field(default_factory=list)  # first few skipped-row messages

    def summary(self) -> str:
        span = f"{self.first} .. {self.last}" if self.first is not None else "empty"
        lines = [
            f"format {self.format}: {self.rows:,} rows read from {', '.join(self.files)}",
            f"stored {self.minutes:,} minutes ({span} UTC): {self.requests:,.0f} requests, "
            f"{self.input_tokens:,.0f} input tokens, {self.output_tokens:,.0f} output tokens",
        ]
        notes = [
            (self.skipped, "malformed rows skipped"),
            (self.blank_intervals, "blank intervals kept as missing"),
            (self.out_of_order, "rows out of time order (aggregated anyway)"),
            (self.duplicate_times, "intervals repeated (summed)"),
        ]
        lines += [f"  {n:,} {what}" for n, what in notes if n]
        lines += [f"  skipped: {p}" for p in self.problems]
        return "\n".join(lines)


# ---------------------------------------------------------------- accumulation
_CTX_RATIO = 1.1  # log-spaced histogram bins: p95 within ~5%
_CTX_BINS = int(np.ceil(np.log(MAX_TOKENS + 1) / np.log(_CTX_RATIO))) + 1


class MinuteAccumulator:
    """Sums per minute, held in one block per UTC day so sparse spans stay small."""

    def __init__(self) -> None:
        self.days: dict[int, dict[str, np.ndarray]] = {}
        self.any_count_nan: dict[int, np.ndarray] = {}

    def _block(self, day: int, with_hist: bool) -> dict[str, np.ndarray]:
        b = self.days.get(day)
        if b is None:
            b = {s: np.zeros(1440) for s in ("requests", "input_tokens", "output_tokens", "seen", "ctx_max")}
            if with_hist:
                b["hist"] = np.zeros((1440, _CTX_BINS), dtype=np.uint32)
            self.days[day] = b
        return b

    def add(self, minutes: np.ndarray, requests: np.ndarray, inp: np.ndarray | None,
            out: np.ndarray | None, with_hist: bool) -> None:
        days = minutes // 1440
        for day in np.unique(days):
            sel = days == day
            mod = (minutes[sel] - day * 1440).astype(np.int64)
            b = self._block(int(day), with_hist)
            b["seen"] += np.bincount(mod, minlength=1440)
            b["requests"] += np.bincount(mod, weights=requests[sel], minlength=1440)
            if inp is not None:
                b["input_tokens"] += np.bincount(mod, weights=inp[sel], minlength=1440)
                if with_hist:
                    bins = np.minimum((np.log1p(inp[sel]) / np.log(_CTX_RATIO)).astype(np.int64), _CTX_BINS - 1)
                    np.add.at(b["hist"], (mod, bins), 1)
            if out is not None:
                b["output_tokens"] += np.bincount(mod, weights=out[sel], minlength=1440)

    def fill_request_span(self) -> None:
        """In a request log, a minute inside the log's span with no request had zero load."""
        if not self.days:
            return
        first, last = min(self.days), max(self.days)
        lo, hi = self._span()
        for day in range(first, last + 1):
            b = self._block(day, "hist" in next(iter(self.days.values())))
            idx = np.arange(1440) + day * 1440
            b["seen"][(idx >= lo) & (idx <= hi) & (b["seen"] == 0)] = -1  # -1: observed zero

    def _span(self) -> tuple[int, int]:
        firsts = [d * 1440 + int(np.flatnonzero(b["seen"] > 0)[0]) for d, b in self.days.items() if (b["seen"] > 0).any()]
        lasts = [d * 1440 + int(np.flatnonzero(b["seen"] > 0)[-1]) for d, b in self.days.items() if (b["seen"] > 0).any()]
        return min(firsts), max(lasts)

    def frame(self, has_tokens: bool) -> pd.DataFrame:
        parts = []
        for day in sorted(self.days):
            b = self.days[day]
            keep = b["seen"] != 0
            if not keep.any():
                continue
            idx = (np.flatnonzero(keep) + day * 1440).astype("int64") * 60_000_000_000
            cols = {"requests": b["requests"][keep]}
            if has_tokens:
                cols.update(_token_columns(b, keep))
            parts.append(pd.DataFrame(cols, index=pd.DatetimeIndex(idx.astype("datetime64[ns]"), name="time")))
        if not parts:
            return pd.DataFrame(columns=["requests"], index=pd.DatetimeIndex([], name="time"), dtype=float)
        return pd.concat(parts)


def _token_columns(b: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    req = b["requests"][keep]
    inp = b["input_tokens"][keep]
    with np.errstate(invalid="ignore", divide="ignore"):
        ctx_mean = np.where(req > 0, inp / np.maximum(req, 1), np.nan)
    cols = {"input_tokens": inp, "output_tokens": b["output_tokens"][keep], "ctx_mean": ctx_mean}
    if "hist" in b:
        cols["ctx_p95"] = _hist_quantile(b["hist"][keep], 0.95)
    return cols


def _hist_quantile(hist: np.ndarray, q: float) -> np.ndarray:
    """Quantile per row of a log-binned histogram (geometric middle of the bin)."""
    total = hist.sum(axis=1)
    cum = np.cumsum(hist, axis=1)
    pos = np.argmax(cum >= np.ceil(q * total)[:, None], axis=1)
    value = np.expm1((pos + 0.5) * np.log(_CTX_RATIO))
    return np.where(total > 0, np.round(value), np.nan)


# ---------------------------------------------------------------- reading
def detect_format(path: Path) -> str:
    """Guess the preset from the columns of the first record."""
    cols = _peek_columns(path)
    for name in ("azure", "mooncake", "warmcast", "counts"):
        p = PRESETS[name]
        needed = [c for c in (p.time, p.input, p.output, p.count) if c]
        if all(c in cols for c in needed):
            return name
    if "created" in cols and ("usage.prompt_tokens" in cols or "usage" in cols):
        return "openai"
    raise InputError(f"{path}: cannot tell the log format from its columns {sorted(cols)[:12]}; "
                     "pass --format and, if needed, --time-col/--input-col/--output-col/--count-col")


def _peek_columns(path: Path) -> list[str]:
    kind = _file_kind(path)
    if kind == "parquet":
        import pyarrow.parquet as pq
        return pq.ParquetFile(path).schema_arrow.names
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline().strip()
    if kind == "jsonl":
        try:
            return list(pd.json_normalize(json.loads(first)).columns)
        except (json.JSONDecodeError, AttributeError):
            raise InputError(f"{path}:1: first line is not a JSON object") from None
    import csv

    return [c.strip() for c in next(csv.reader([first]), [])]


def _file_kind(path: Path) -> str:
    suffix = "".join(path.suffixes[-2:]).lower()
    if suffix.endswith((".parquet", ".pq")):
        return "parquet"
    if suffix.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "csv"


@dataclass
class Chunk:
    """Raw columns of up to chunk_rows rows, as strings or numbers; line numbers for errors."""

    columns: dict[str, pa.Array]
    first_line: int  # file line number of the chunk's first row


CSV_BLOCK_BYTES = 16 << 20


def _iter_csv(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    """Parse the file in blocks of whole lines.  Reading the blocks ourselves, rather than
    with pyarrow's streaming reader, bounds memory: that reader reads far ahead."""
    import pyarrow.csv as pv

    header = _peek_columns(path)
    missing = [c for c in cols if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; the file has {header}")
    opts = pv.ConvertOptions(include_columns=cols, column_types={c: pa.string() for c in cols},
                             strings_can_be_null=True)
    read = pv.ReadOptions(column_names=header, use_threads=True, block_size=1 << 22)
    line = 2
    with open(path, "rb") as fh:
        fh.readline()
        while block := fh.read(CSV_BLOCK_BYTES):
            block += fh.readline()  # finish the last line of the block
            try:
                table = pv.read_csv(io.BytesIO(block), read_options=read, convert_options=opts)
            except pa.ArrowInvalid as err:
                raise InputError(f"{path}: unreadable CSV after line {line}: {err}") from None
            yield Chunk({c: table.column(c).combine_chunks() for c in cols}, line)
            line += table.num_rows


def _iter_jsonl(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    line = 1
    with open(path, encoding="utf-8") as fh:
        while True:
            lines = [ln for _, ln in zip(range(chunk_rows), fh)]
            if not lines:
                return
            yield Chunk(_json_columns(path, lines, cols, line), line)
            line += len(lines)


def _json_columns(path: Path, lines: list[str], cols: list[str], line0: int) -> dict[str, pa.Array]:
    records = []
    for i, text in enumerate(lines):
        if not text.strip():
            records.append({})
            continue
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError as err:
            records.append({"__bad__": f"{path}:{line0 + i}: not valid JSON ({err.msg})"})
    flat = pd.json_normalize(records)
    out = {}
    for c in cols:
        vals = flat[c] if c in flat.columns else pd.Series([None] * len(records))
        out[c] = pa.array(vals.map(lambda v: None if v is None or v != v else str(v)), type=pa.string())
    if "__bad__" in flat.columns:
        out["__bad__"] = pa.array(flat["__bad__"].map(lambda v: v if isinstance(v, str) else None), type=pa.string())
    return out


def _iter_parquet(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    missing = [c for c in cols if c not in pf.schema_arrow.names]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; the file has {pf.schema_arrow.names}")
    line = 1
    for batch in pf.iter_batches(batch_size=chunk_rows, columns=cols):
        yield Chunk({c: batch.column(c) for c in cols}, line)
        line += batch.num_rows


_READERS = {"csv": _iter_csv, "jsonl": _iter_jsonl, "parquet": _iter_parquet}


# ---------------------------------------------------------------- parsing
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


def _times(arr: pa.Array, preset: Preset, tz: str, epoch_ns: int) -> np.ndarray:
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
    ns = _times(chunk.columns[preset.time], preset, tz, epoch_ns)
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


# ---------------------------------------------------------------- driver
def resolve_preset(fmt: str, path: Path, time_col: str | None = None, input_col: str | None = None,
                   output_col: str | None = None, count_col: str | None = None,
                   time_unit: str | None = None) -> tuple[str, Preset]:
    """The preset for a file, with any column mapping applied."""
    name = detect_format(path) if fmt == "auto" else fmt
    if name not in PRESETS:
        raise InputError(f"unknown format {fmt!r}; choose one of {sorted(PRESETS)} or auto")
    p = PRESETS[name]
    over = {k: v for k, v in dict(time=time_col, input=input_col, output=output_col,
                                  count=count_col, time_unit=time_unit).items() if v}
    if name == "counts" and not input_col:
        cols = _peek_columns(path)
        over.setdefault("input", "input_tokens" if "input_tokens" in cols else None)
        over.setdefault("output", "output_tokens" if "output_tokens" in cols else None)
    return name, Preset(**{**p.__dict__, **over})


def aggregate_file(paths: list[str | Path], fmt: str = "auto", on_error: OnError = "fail",
                   tz: str = "UTC", start: str | None = None, chunk_rows: int = CHUNK_ROWS,
                   progress: bool = False, **mapping: str | None) -> tuple[pd.DataFrame, IngestReport]:
    """Read logs into one per-minute frame. Raises InputError (naming file, line, column) on a
    bad row when ``on_error='fail'``; nothing is written anywhere by this function."""
    report = IngestReport(files=[str(p) for p in paths])
    acc = MinuteAccumulator()
    epoch_ns = pd.Timestamp(start or "1970-01-01", tz="UTC").value
    kinds = set()
    for raw_path in paths:
        path = Path(raw_path)
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        name, preset = resolve_preset(fmt, path, **mapping)
        report.format, kinds = name, kinds | {preset.kind}
        _fold_file(path, preset, acc, report, on_error, tz, epoch_ns, chunk_rows, progress)
    if len(kinds) > 1:
        raise InputError("mixing per-request logs and count series in one ingest is not supported")
    has_tokens = any(b["input_tokens"].any() or b["output_tokens"].any() for b in acc.days.values())
    if kinds == {"requests"}:
        acc.fill_request_span()
    frame = acc.frame(has_tokens)
    _finish_report(report, frame)
    return frame, report


def _fold_file(path: Path, preset: Preset, acc: MinuteAccumulator, report: IngestReport,
               on_error: OnError, tz: str, epoch_ns: int, chunk_rows: int, progress: bool) -> None:
    cols = [c for c in dict.fromkeys((preset.time, preset.count, preset.input, preset.output)) if c]
    reader = _READERS[_file_kind(path)](path, cols, chunk_rows)
    bar = _progress(path, progress)
    last_ns = np.iinfo(np.int64).min
    try:
        for chunk in reader:
            parsed = parse_chunk(chunk, preset, tz, epoch_ns)
            keep = _handle_bad(parsed, chunk, path, on_error, report)
            keep &= ~parsed.blank
            report.blank_intervals += int(parsed.blank.sum())
            ns = parsed.ns[keep]
            report.rows += len(parsed.ns)
            if len(ns):
                report.out_of_order += int((np.diff(ns) < 0).sum()) + int(ns[0] < last_ns)
                last_ns = int(ns[-1])
                if preset.kind == "counts":
                    report.duplicate_times += len(ns) - len(np.unique(ns))
            minutes = np.floor_divide(ns, 60_000_000_000)
            pick = (lambda a: None if a is None else a[keep])
            acc.add(minutes, parsed.count[keep], pick(parsed.inp), pick(parsed.out), preset.kind == "requests")
            if bar is not None:
                bar.update(len(parsed.ns))
    except BaseException:
        if bar is not None:  # keep the bar's last state so the error prints on its own line below it
            bar.leave = True
        raise
    finally:
        if bar is not None:
            bar.close()


def _progress(path: Path, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(desc=f"ingest {path.name}", unit=" rows", unit_scale=True, leave=False)


def _handle_bad(parsed: Parsed, chunk: Chunk, path: Path, on_error: OnError, report: IngestReport) -> np.ndarray:
    keep = np.ones(len(parsed.ns), bool)
    if not parsed.bad:
        return keep
    parsed.bad.sort(key=lambda b: b[0])
    row, col, why, value = parsed.bad[0]
    line = chunk.first_line + row
    if on_error == "fail":
        shown = f" (value {value!r})" if value not in ("", None) else ""
        raise InputError(f"{path}:{line}: column {col!r}: {why}{shown}. Nothing was stored; "
                         "fix the row or pass --on-error skip to drop bad rows.")
    rows = np.unique([b[0] for b in parsed.bad])
    keep[rows] = False
    report.skipped += len(rows)
    for row, col, why, value in parsed.bad[: max(0, 5 - len(report.problems))]:
        report.problems.append(f"{path}:{chunk.first_line + row}: column {col!r}: {why} ({value!r})")
    return keep


def _finish_report(report: IngestReport, frame: pd.DataFrame) -> None:
    report.minutes = len(frame)
    if len(frame):
        report.first, report.last = frame.index[0], frame.index[-1]
        report.requests = float(frame["requests"].sum())
        if "input_tokens" in frame:
            report.input_tokens = float(frame["input_tokens"].sum())
            report.output_tokens = float(frame["output_tokens"].sum())


def regular(frame: pd.DataFrame) -> pd.DataFrame:
    """Reindex to every minute between the first and last; missing minutes become NaN."""
    if frame.empty:
        return frame
    idx = pd.date_range(frame.index[0], frame.index[-1], freq="min", name="time")
    return frame.reindex(idx)


def load_minute_frame(path: str | Path, fmt: str = "auto", tz: str = "UTC", **kw) -> pd.DataFrame:
    """Any supported log as a regular per-minute frame (NaN gaps); bad rows raise."""
    frame, _ = aggregate_file([path], fmt=fmt, tz=tz, **kw)
    return regular(frame)


def load_count_series(path: str | Path, tz: str = "UTC") -> pd.Series:
    """A ``time,requests`` count series at its native interval (10 s, 1 min, ...), UTC, sorted.
    Per-request logs are counted per second. Used by the fleet simulator for sub-minute replay."""
    path = Path(path)
    name, preset = resolve_preset("auto", path)
    if preset.kind != "counts":
        frame = pd.DataFrame({"t": _request_times_ns(path, preset, tz)})
        s = frame.groupby(frame["t"] // 1_000_000_000 * 1_000_000_000).size().astype(float)
        return pd.Series(s.to_numpy(), index=pd.DatetimeIndex(s.index.astype("datetime64[ns]"), name="time"),
                         name="requests")
    df = pd.read_csv(path) if _file_kind(path) == "csv" else pd.read_json(path, lines=True)
    t = _times(pa.array(df[preset.time].astype(str)), preset, tz, 0)
    s = pd.Series(pd.to_numeric(df[preset.count], errors="coerce").to_numpy(float),
                  index=pd.DatetimeIndex(t.astype("datetime64[ns]"), name="time"), name="requests")
    return s.groupby(level=0).sum(min_count=1).sort_index()


def _request_times_ns(path: Path, preset: Preset, tz: str) -> np.ndarray:
    preset = Preset(preset.kind, preset.time, preset.time_unit)  # times only
    parts = [parse_chunk(c, preset, tz, 0) for c in _READERS[_file_kind(path)](path, [preset.time], CHUNK_ROWS)]
    ns = np.concatenate([p.ns for p in parts]) if parts else np.array([], np.int64)
    return ns[ns != np.iinfo(np.int64).min]
