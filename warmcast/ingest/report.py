"""What one ingest read, kept, skipped and noticed."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from warmcast.ingest.parts import Carry


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
    long_gaps: int = 0  # silences over a day in a request log, kept missing
    partial_minute: pd.Timestamp | None = None  # the minute the log ends in, not stored
    partial_requests: float = 0.0  # what that minute held
    problems: list[str] = field(default_factory=list)  # first few skipped-row messages
    resolution_min: int = 1  # minutes per bin: a count series coarser than a minute keeps its interval
    unfinished_bin: pd.Timestamp | None = None  # a coarse series' last bin, not ended yet: not stored
    interval: str = ""  # a count series' interval, as "5-minute" or "10-second"
    shifted: int = 0  # a count series' stamps off its grid, moved to their nearest bin (warmcast.ingest.interval)
    shifted_first: str = ""  # the first of them: "file:line (time -> bin)"
    missing_intervals: int = 0  # a count series' bins with no stamp between its first and last: kept missing
    incomplete_minutes: int = 0  # a finer series' minutes a missing interval falls in: kept missing
    # a request log in parts over several calls (warmcast.ingest.parts): its first minute, the requests the
    # previous part's last minute held (joined to it), the stored value kept for it, and its own last minute
    first_minute: pd.Timestamp | None = None
    first_requests: float = 0.0
    joined_requests: float | None = None
    kept_first: float | None = None
    carry: Carry | None = None

    def summary(self) -> str:
        span = f"{self.first} .. {self.last}" if self.first is not None else "empty"
        bins = f"{self.minutes:,} minutes" if self.resolution_min == 1 else \
            f"{self.minutes:,} bins of {self.resolution_min} min (the series' own interval)"
        lines = [
            f"format {self.format}: {self.rows:,} rows read from {', '.join(self.files)}",
            f"stored {bins} ({span} UTC): {self.requests:,.0f} requests"
            + ("" if self.format == "counts" else   # a count series carries no tokens (issue 32: "0 input tokens")
               f", {self.input_tokens:,.0f} input tokens, {self.output_tokens:,.0f} output tokens"),
        ]
        notes = [
            (self.skipped, "malformed rows skipped"),
            (self.blank_intervals, "blank intervals kept as missing"),
            (self.out_of_order, "rows out of time order (aggregated anyway)"),
            (self.duplicate_times, "intervals repeated, in a file or across the files of this call (summed: "
                                   "check that no two exports overlap)"),
            (self.long_gaps, "silences over a day between requests kept missing (the log does not cover them)"),
            (self.missing_intervals, "intervals missing between stamps (kept missing, not zero)"),
            (self.incomplete_minutes, "minutes holding only some of their intervals kept missing (a part of a "
                                      "minute is not its load)"),
            (self.shifted, f"stamps off the {self.interval} grid moved to their nearest bin (the first: "
                           f"{self.shifted_first})"),
        ]
        lines += [f"  {n:,} {what}" for n, what in notes if n]
        lines += self._parts()
        if self.partial_minute is not None:
            lines.append(f"  last minute {self.partial_minute:%Y-%m-%d %H:%M} not stored: the log ends inside it "
                         f"({self.partial_requests:,.0f} requests seen); pass the log that continues it in the "
                         "same call, or ingest it next: its first minute is joined to this one")
        if self.unfinished_bin is not None:
            lines.append(f"  last bin {self.unfinished_bin:%Y-%m-%d %H:%M} not stored: it has not ended yet "
                         f"(it ends at {self.unfinished_bin + pd.Timedelta(minutes=self.resolution_min):%H:%M} UTC)")
        lines += [f"  skipped: {p}" for p in self.problems]
        return "\n".join(lines)

    def _parts(self) -> list[str]:
        """What became of this log's first minute, where a previous part had ended inside it."""
        if self.first_minute is None:
            return []
        if self.joined_requests is not None:
            return [f"  first minute {self.first_minute:%H:%M} joined to the {self.joined_requests:,.0f} requests "
                    f"the previous part ended with: {self.first_requests:,.0f} requests"]
        if self.kept_first is not None:
            return [f"  first minute {self.first_minute:%H:%M} kept as stored ({self.kept_first:,.0f} requests): "
                    f"this log starts inside it ({self.first_requests:,.0f} seen), and a part never replaces a minute "
                    "stored whole"]
        return []

    def finish(self, frame: pd.DataFrame) -> None:
        """Totals of what is about to be stored."""
        self.minutes = len(frame)
        self.first = self.last = None  # called again when a caller drops a minute (warmcast.logparts)
        self.requests = self.input_tokens = self.output_tokens = 0.0
        if len(frame):
            self.first, self.last = frame.index[0], frame.index[-1]
            self.requests = float(frame["requests"].sum())
            if "input_tokens" in frame:
                self.input_tokens = float(frame["input_tokens"].sum())
                self.output_tokens = float(frame["output_tokens"].sum())
