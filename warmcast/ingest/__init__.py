"""Request-log ingestion: any supported log in, per-minute load series out.

Per-request logs (CSV, JSONL or Parquet; presets for the Azure LLM trace, the
Mooncake trace, OpenAI/vLLM-style access logs and warmcast's own generator) and
per-interval count series (``time,requests`` at any interval) are read in chunks
(``readers``), turned into numbers (``parse``) and folded into a
:class:`~warmcast.ingest.accumulate.MinuteAccumulator`, so memory grows with the
number of minutes covered, never with the number of rows.

Nothing here talks to Redis: :func:`aggregate_file` returns the per-minute frame
and an :class:`~warmcast.ingest.report.IngestReport`; ``warmcast.store`` writes the
frame atomically.

Times outside :class:`~warmcast.ingest.window.TimeWindow` are bad rows (the store
applies the same rule to every write).  The minute a log ends in is left out and named in
the report: it is usually partial, and as the newest value it is what a forecast starts from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmcast.ingest.accumulate import MinuteAccumulator, regular
from warmcast.ingest.formats import OnError, Preset, resolve_preset
from warmcast.ingest.interval import Stamps, fit_interval, label
from warmcast.ingest.parse import Parsed, parse_chunk
from warmcast.ingest.parts import Carry, Spans, refuse_same_files
from warmcast.ingest.readers import Chunk, read_chunks
from warmcast.ingest.report import IngestReport
from warmcast.ingest.window import FUTURE_SLACK_NS, NS_PER_MIN, TimeWindow
from warmcast.resolution import with_resolution
from warmcast.text import shown

CHUNK_ROWS = 1_000_000


def aggregate_file(paths: list[str | Path], fmt: str = "auto", on_error: OnError = "fail",
                   tz: str = "UTC", start: str | None = None, chunk_rows: int = CHUNK_ROWS,
                   progress: bool = False, window: TimeWindow | None = None, carry: Carry | None = None,
                   **mapping: str | None) -> tuple[pd.DataFrame, IngestReport]:
    """Read logs into one per-minute frame. Raises InputError (naming file, line, column) on a
    bad row when ``on_error='fail'``; nothing is written anywhere by this function.

    ``window`` bounds the times (default: none later than now + 1 day, none before 1970);
    ``LoadStore.window`` adds the deployment's retention and newest stored day.  ``carry``: the
    minute the previous part of a request log ended inside, joined to this one's first minute when
    this log continues it; this log's own is ``report.carry`` (warmcast.ingest.parts)."""
    fold = _Fold(IngestReport(files=[str(p) for p in paths]), on_error, window or TimeWindow.around(),
                 tz, pd.Timestamp(start or "1970-01-01", tz="UTC").value, carry=carry)
    kinds = set()
    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise InputError(f"{path}: no such file")
    refuse_same_files(files)
    for path in files:
        name, preset = resolve_preset(fmt, path, **mapping)
        fold.report.format, kinds = name, kinds | {preset.kind}
        fold.file(path, preset, chunk_rows, progress)
    if len(kinds) > 1:
        raise InputError("mixing per-request logs and count series in one ingest is not supported")
    return fold.finish(kinds == {"requests"})


@dataclass
class _Fold:
    """One ingest in progress: the accumulator and what is known across chunks and files."""

    report: IngestReport
    on_error: OnError
    window: TimeWindow
    tz: str
    epoch_ns: int
    acc: MinuteAccumulator = field(default_factory=MinuteAccumulator)
    last_ns: int = np.iinfo(np.int64).min  # previous row, to count rows out of order
    max_ns: int = np.iinfo(np.int64).min
    step_ns: int = NS_PER_MIN  # a count series' interval (its dominant step), for its last minute
    stamps: Stamps = field(default_factory=Stamps)  # a count series' times, over chunks and files: its interval
    spans: Spans = field(default_factory=Spans)  # each request log's first and last time, for parts that overlap
    carry: Carry | None = None  # the previous part's last minute (a request log split mid-minute)

    def file(self, path: Path, preset: Preset, chunk_rows: int, progress: bool) -> None:
        bar = _progress(path, progress)
        try:
            for chunk, parsed in parsed_chunks(path, preset, self.tz, self.epoch_ns, self.window, chunk_rows):
                self.chunk(parsed, chunk, path, preset)
                if bar is not None:
                    bar.update(len(parsed.ns))
        except BaseException:
            if bar is not None:  # keep the bar's last state so the error prints on its own line below it
                bar.leave = True
            raise
        finally:
            if bar is not None:
                bar.close()

    def chunk(self, parsed: Parsed, chunk: Chunk, path: Path, preset: Preset) -> None:
        """Add one parsed chunk's good rows; blank intervals mark their minutes missing."""
        report = self.report
        keep = _handle_bad(parsed, chunk, path, self.on_error, report)
        blank = keep & parsed.blank
        keep &= ~parsed.blank
        report.blank_intervals += int(parsed.blank.sum())
        report.rows += len(parsed.ns)
        self.acc.mark_blank(parsed.ns[blank] // NS_PER_MIN)
        ns = parsed.ns[keep]
        if preset.kind == "counts":  # blank intervals are bins of the grid too (every other minute blank is minutes)
            rows = np.flatnonzero(keep | blank)
            self.stamps.add(parsed.ns[rows], chunk.lines_of(rows), str(path), blank[rows])
        if len(ns):
            report.out_of_order += int((np.diff(ns) < 0).sum()) + int(ns[0] < self.last_ns)
            self.last_ns, self.max_ns = int(ns[-1]), max(self.max_ns, int(ns.max()))
            if preset.kind == "requests":
                self.spans.add(path, int(ns.min()), int(ns.max()))
        kept = np.flatnonzero(keep)
        pick = (lambda a: None if a is None else a[keep])
        self.acc.add(ns // NS_PER_MIN, parsed.count[keep], pick(parsed.inp), pick(parsed.out),
                     preset.kind == "requests", where=lambda i: f"{path}:{chunk.line(int(kept[i]))}")

    def finish(self, requests_log: bool) -> tuple[pd.DataFrame, IngestReport]:
        acc, report = self.acc, self.report
        self.spans.refuse_overlaps()
        if not requests_log:
            self._fit_interval()
        self._refuse_too_old()
        has_tokens = any(b["input_tokens"].any() or b["output_tokens"].any() for b in acc.days.values())
        if requests_log:
            self._join_carry()
            report.long_gaps = acc.fill_request_span()
        self._drop_partial_last_minute(requests_log)
        self._drop_unfinished_bin()
        frame = with_resolution(acc.frame(has_tokens), report.resolution_min)
        report.finish(frame)
        return frame, report

    def _fit_interval(self) -> None:
        """A count series' interval from the step its stamps agree on (warmcast.ingest.interval); a stamp
        off its grid is moved to its nearest bin, counted and named, or the file is refused."""
        report, stamps = self.report, self.stamps
        report.duplicate_times = stamps.repeated()  # summed, and said (issue 31)
        fit = fit_interval(stamps.distinct(), stamps.where)
        for src, dst in zip((fit.shifted // NS_PER_MIN).tolist(), (fit.snapped // NS_PER_MIN).tolist()):
            if src != dst:
                self.acc.move_minute(src, dst)
        if len(fit.shifted):
            t, to = pd.Timestamp(int(fit.shifted[0])), pd.Timestamp(int(fit.snapped[0]))
            report.shifted_first = f"{stamps.where(int(fit.shifted[0]))} ({t:%Y-%m-%d %H:%M:%S} -> {to:%H:%M})"
        self.acc.mark_blank(fit.incomplete)
        report.shifted, report.missing_intervals, report.incomplete_minutes = len(fit.shifted), fit.missing, \
            len(fit.incomplete)
        report.interval = label(fit.step_ns) if fit.step_ns else ""
        report.resolution_min, self.step_ns = fit.resolution_min, fit.step_ns or NS_PER_MIN

    def _join_carry(self) -> None:
        """The previous part's last minute joined to this log's first when this log continues it: a
        minute split over two parts is the sum of both (issue 41), never the later part's share."""
        first, report = self.acc.first_minute(), self.report
        if first is None:
            return
        first_ns = min(span[0] for span in self.spans.by_file.values())
        if self.carry is not None and self.carry.continued_by(first, first_ns):
            c = self.carry
            self.acc.add_minute(first, c.requests, c.input_tokens, c.output_tokens, c.hist)
            report.joined_requests = c.requests
        report.first_minute, report.first_requests = pd.Timestamp(first * NS_PER_MIN), self.acc.minute_values(first)[0]

    def _drop_unfinished_bin(self) -> None:
        """A coarse series' newest bin that ends after now is still filling (a live export): stored,
        it would be a far too low newest value, which a forecast starts from."""
        res, last = self.report.resolution_min, self.acc.last_minute()
        now_min = (self.window.latest_ns - FUTURE_SLACK_NS) // NS_PER_MIN
        if res > 1 and last is not None and last + res > now_min:
            self.report.unfinished_bin = pd.Timestamp(last * NS_PER_MIN)
            self.report.partial_requests = self.acc.drop_minute(last)

    def _refuse_too_old(self) -> None:
        """Rows retention would delete at once (counted from the newest accepted row) are refused."""
        last = self.acc.last_minute()
        cut = None if last is None else self.window.cutoff_day(last // 1440)
        if cut is None or min(self.acc.days) > cut:
            return
        reason = self.window.too_old_reason(last // 1440)
        rows, where = self.acc.drop_days_through(cut)
        if self.on_error == "fail":
            raise InputError(f"{where}: {reason}. Nothing was stored; fix the row or pass --on-error skip "
                             "to drop such rows.")
        self.report.skipped += rows
        self.report.problems.append(f"{where} and {rows - 1:,} more rows: {reason}")

    def _drop_partial_last_minute(self, requests_log: bool) -> None:
        """The minute a log ends in is usually partial (the log stops mid-minute); stored, it would
        be the newest, far too low value a forecast starts from.  A request log cannot say whether
        traffic went on, so its last minute is always dropped; a count series' only when its last
        interval ends before the minute does."""
        last = self.acc.last_minute()
        if last is None:
            return
        if not requests_log:
            covered_to = self.max_ns + self.step_ns
            if self.step_ns >= NS_PER_MIN or covered_to >= (last + 1) * NS_PER_MIN:
                return
        if requests_log:  # kept aside: the next part's first minute is joined to it
            req, inp, out, hist = self.acc.minute_values(last)
            self.report.carry = Carry(last, self.max_ns, req, inp, out, hist)
        self.report.partial_minute = pd.Timestamp(last * NS_PER_MIN)
        self.report.partial_requests = self.acc.drop_minute(last)


def parsed_chunks(path: Path, preset: Preset, tz: str, epoch_ns: int, window: TimeWindow | None,
                  chunk_rows: int = CHUNK_ROWS) -> Iterator[tuple[Chunk, Parsed]]:
    """A log's chunks, each with its rows parsed and checked (``Parsed.bad``): the one reading every
    command shares, so ``replay`` refuses what ``ingest`` refuses (issue 41)."""
    cols = [c for c in dict.fromkeys((preset.time, preset.count, preset.input, preset.output)) if c]
    for chunk in read_chunks(path, cols, chunk_rows):
        yield chunk, parse_chunk(chunk, preset, tz, epoch_ns, window)


def first_bad_row(parsed: Parsed, chunk: Chunk, path: Path) -> str:
    """'file:line: column 'c': why (value ...)' of the first refused row of a chunk (``parsed.bad`` non-empty)."""
    row, col, why, value = min(parsed.bad, key=lambda b: b[0])
    seen = f" (value {shown(value)})" if value not in ("", None) else ""
    return f"{path}:{chunk.line(row)}: column {col!r}: {why}{seen}"


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
    if on_error == "fail":
        raise InputError(f"{first_bad_row(parsed, chunk, path)}. Nothing was stored; "
                         "fix the row or pass --on-error skip to drop bad rows.")
    rows = np.unique([b[0] for b in parsed.bad])
    keep[rows] = False
    report.skipped += len(rows)
    for row, col, why, value in parsed.bad[: max(0, 5 - len(report.problems))]:
        report.problems.append(f"{path}:{chunk.line(row)}: column {col!r}: {why} ({shown(value)})")
    return keep


def load_minute_frame(path: str | Path, fmt: str = "auto", tz: str = "UTC", **kw) -> pd.DataFrame:
    """Any supported log as a regular frame (NaN gaps) at its resolution: per minute, or a
    coarser count series' own interval (``attrs['resolution_min']``); bad rows raise."""
    frame, report = aggregate_file([path], fmt=fmt, tz=tz, **kw)
    return with_resolution(regular(frame, report.resolution_min), report.resolution_min)


def load_count_series(path: str | Path, fmt: str = "auto", tz: str = "UTC", start: str | None = None,
                      **mapping: str | None) -> pd.Series:
    """A ``time,requests`` count series at its native interval (10 s, 1 min, ...), UTC, sorted.
    Per-request logs are counted per second. Used by the fleet simulator for sub-minute replay.
    ``fmt``, ``start`` and ``mapping`` (time_col, count_col, ...) mean what they mean for ingest, and
    the rows are checked as ingest checks them: a bad row is an InputError naming file, line and column."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    _, preset = resolve_preset(fmt, path, **mapping)
    epoch_ns = pd.Timestamp(start or "1970-01-01", tz="UTC").value
    stamps, counts = Stamps(), []
    for chunk, parsed in parsed_chunks(path, preset, tz, epoch_ns, TimeWindow.around()):
        if parsed.bad:
            raise InputError(f"{first_bad_row(parsed, chunk, path)}; fix the row")
        stamps.add(parsed.ns, chunk.lines_of(np.arange(len(parsed.ns))), str(path), parsed.blank)
        counts.append(parsed.count)  # NaN where a count series' interval is blank
    ns = stamps.times()
    values = np.concatenate(counts) if counts else np.array([], float)
    if preset.kind != "counts":
        ns = ns // 1_000_000_000 * 1_000_000_000
    else:  # on the interval its stamps agree on, as ingest keeps it: a stamp off its grid moved to its bin
        fit = fit_interval(stamps.distinct(), stamps.where)
        at = np.minimum(np.searchsorted(fit.shifted, ns), max(len(fit.shifted) - 1, 0))
        moved = fit.shifted[at] == ns if len(fit.shifted) else np.zeros(len(ns), bool)
        ns = np.where(moved, fit.snapped[at] if len(fit.shifted) else ns, ns)
    s = pd.Series(values, index=pd.DatetimeIndex(ns.astype("datetime64[ns]"), name="time"), name="requests")
    return s.groupby(level=0).sum(min_count=1).sort_index()
