"""Arrivals from a gateway's access log, followed as it grows (``warmcast ingest --follow``).

A gateway or router in front of the fleet logs every request it accepts, so its log counts
arrivals as demand, whichever instance (if any) served them: an alternative to counting them
from the instances' counters, chosen per deployment in the deployments file
(``signals: {arrivals: access_log, access_log: PATH}``).

Each poll parses the complete lines appended since the last one (JSON lines, with the same
presets and column flags as ``ingest``) and counts requests per minute.  A minute is written
once it has been over for ``grace_s`` (gateways buffer their log writes); a minute with no line is a
zero, since the gateway logs every request, but only up to ``silence_min`` minutes after the last line:
a log silent for longer may have stopped (a gateway down, the log moved), so later minutes are left
missing, never zero, and the poll's report says since when the log has been silent (issue 41: a log
that had stopped 3 h before was written as 170 minutes without traffic).  A line for a minute already
written is late: counted in the report, not stored.

Where the follower is lives in Redis (``P:follow:D``): the file's inode, the byte offset and line
number of the first unread line, the counts of minutes still open and the last minute written.
It is saved after each poll's write, so a follower killed at any moment resumes from the last
save, reads again at most one poll's lines and writes the same minutes again (a write sets a
minute, it never adds): nothing is lost or counted twice.

Rotation (``warmcast.ingest.rotation``): the state also keeps a fingerprint of the file's first
bytes.  When the file at the path is no longer the one being read (another inode, shorter than
the offset, or other first bytes: a truncation regrown past the offset), the old file is read to
its end first (still open, or found beside the path by inode, or by its first bytes for the copy
``copytruncate`` made), then the new file from its start.  While the path is missing (deleted,
or renamed with no new file yet) the old file is read as it grows and the follower waits.
A line longer than ``MAX_LINE_BYTES`` is skipped and named, never held in memory whole.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmcast.ingest.formats import Preset
from warmcast.ingest.parse import parse_chunk
from warmcast.ingest.readers import BOM, MAX_LINE_BYTES, Chunk, _json_columns, line_too_long
from warmcast.ingest.rotation import FP_BYTES as FP_MAX, find_rotated, fingerprint, is_same_file
from warmcast.ingest.window import NS_PER_MIN
from warmcast.text import shown

MAX_READ_BYTES = 32 << 20  # one poll's read; a backlog is caught up over several polls
SILENCE_MIN = 5  # minutes after the last line written as zeros; later ones stay missing (--silence-min)


@dataclass
class FollowState:
    inode: int = 0
    offset: int = 0   # byte offset of the first line not read yet
    line: int = 1     # its line number, for errors
    written: int | None = None  # the last minute written (minutes since the epoch)
    open: dict[int, list[float]] = field(default_factory=dict)  # minute -> [requests, input, output]
    fp: str = ""      # hash of the file's first fp_len bytes (warmcast.ingest.rotation)
    fp_len: int = 0
    skipping: bool = False  # inside a line over MAX_LINE_BYTES: discard up to its newline
    last_line: int | None = None  # the newest written minute that had a line: zeros reach silence_min past it


@dataclass
class PollReport:
    lines: int = 0
    minutes_written: int = 0
    late: int = 0
    rotated: bool = False
    bad: list[str] = field(default_factory=list)  # "file:line: why" of the lines skipped
    silent_since: int | None = None  # the minute of the last line, when this poll first left minutes missing
    silence_min: int = SILENCE_MIN

    def summary(self) -> str:
        out = f"{self.lines} lines, {self.minutes_written} minutes written"
        if self.late:
            out += f", {self.late} late lines not stored (their minute was written already)"
        if self.rotated:
            out += ", log rotated: reading the new file from its start"
        if self.silent_since is not None:
            since = pd.Timestamp(self.silent_since * NS_PER_MIN)
            out += (f", log silent since {since:%Y-%m-%d %H:%M} UTC (its last line): minutes after "
                    f"{since + pd.Timedelta(minutes=self.silence_min):%H:%M} left missing, not zero (--silence-min "
                    f"{self.silence_min})")
        return out


class Follower:
    def __init__(self, path: Path, deployment: str, store: Any, preset: Preset, tz: str = "UTC",
                 grace_s: float = 10.0, silence_min: int = SILENCE_MIN) -> None:
        if preset.kind != "requests":
            raise InputError(f"{path}: --follow counts requests from an access log; a count series "
                             "is ingested without --follow")
        self.path, self.dep, self.store, self.preset, self.tz = Path(path), deployment, store, preset, tz
        self.grace_s, self.silence_min = grace_s, int(silence_min)
        self.key = f"{store.prefix}:follow:{deployment}"
        self._fh: Any = None  # the file being read (state's inode), kept open so a renamed or deleted one is finished

    def state(self) -> FollowState:
        raw = self.store.r.get(self.key)
        if raw is None:
            return FollowState()
        d = json.loads(raw)
        return FollowState(d["inode"], d["offset"], d["line"], d["written"],
                           {int(k): v for k, v in d["open"].items()},
                           d.get("fp", ""), d.get("fp_len", 0), d.get("skipping", False),
                           d.get("last_line", d["written"]))  # a state saved before it: the last minute written

    def _save(self, st: FollowState) -> None:
        self.store.r.set(self.key, json.dumps(asdict(st)))

    def poll(self, now_s: float | None = None) -> PollReport:
        """Read what was appended, write the minutes now complete, save where it got to."""
        now_s = time.time() if now_s is None else now_s
        st, rep = self.state(), PollReport(silence_min=self.silence_min)
        here = self._open_path()
        stale = bool(st.inode) and not (here is not None and is_same_file(here, st.inode, st.offset, st.fp,
                                                                          st.fp_len))
        if stale and not self._finish_old(st, rep, switching=here is not None):
            if here is not None:
                here.close()
            self._save(st)  # no file at the path (a rotation under way): minutes stay open, none written as zero
            return rep
        if here is None:
            return rep
        if stale or not st.inode:
            self._switch(st, rep, here)
        elif self._fh is None or os.fstat(self._fh.fileno()).st_ino != st.inode:
            if self._fh is not None:
                self._fh.close()
            self._fh = here  # a follower (re)started on the file it was reading
        else:
            here.close()
        self._read(st, rep)
        self._write_complete(st, rep, now_s)
        self._save(st)
        return rep

    def _open_path(self) -> Any:
        try:
            return open(self.path, "rb")
        except FileNotFoundError:
            return None

    def _old_file(self, st: FollowState) -> Any:
        """The file read so far, wherever it is now: still open here, or renamed or copied beside the path."""
        if self._fh is not None and is_same_file(self._fh, st.inode, st.offset, st.fp, st.fp_len):
            return self._fh
        if self._fh is not None:
            self._fh.close()
        self._fh = find_rotated(self.path, st.inode, st.offset, st.fp, st.fp_len)
        return self._fh

    def _finish_old(self, st: FollowState, rep: PollReport, switching: bool) -> bool:
        """Read the rotated file on from the offset; True once it is done and the path's file may be read.
        When a new file is at the path its writer has moved on, so an unterminated last line is whole."""
        old = self._old_file(st)
        if old is None:
            return switching
        old.seek(st.offset)
        data = old.read(MAX_READ_BYTES)
        done = switching and len(data) < MAX_READ_BYTES
        if done and data and not data.endswith(b"\n"):
            data += b"\n"
        self._consume(st, rep, data)
        return done

    def _switch(self, st: FollowState, rep: PollReport, fh: Any) -> None:
        rep.rotated = st.inode != 0
        if self._fh is not None:
            self._fh.close()
        self._fh = fh
        st.inode, st.offset, st.line, st.fp, st.fp_len, st.skipping = os.fstat(fh.fileno()).st_ino, 0, 1, "", 0, False

    def _read(self, st: FollowState, rep: PollReport) -> None:
        self._fh.seek(st.offset)
        self._consume(st, rep, self._fh.read(MAX_READ_BYTES))
        if st.fp_len < min(st.offset, FP_MAX):
            st.fp, st.fp_len = fingerprint(self._fh, st.offset)

    def _consume(self, st: FollowState, rep: PollReport, data: bytes) -> None:
        """Fold the whole lines of ``data`` (read at st.offset); a line still being written waits, a line
        over MAX_LINE_BYTES is skipped (st moves past what of it was read) and named in the report."""
        if st.skipping:
            nl = data.find(b"\n")
            st.offset += len(data) if nl < 0 else nl + 1
            if nl < 0:
                return
            st.skipping, st.line, data = False, st.line + 1, data[nl + 1:]
        end = data.rfind(b"\n")
        self._fold(st, rep, data[:end + 1])
        tail = len(data) - (end + 1)
        if tail > MAX_LINE_BYTES:  # the line being written is already too long: never held whole
            rep.bad.append(line_too_long(self.path, st.line))
            st.offset, st.skipping = st.offset + tail, True

    def _fold(self, st: FollowState, rep: PollReport, data: bytes) -> None:
        raw = data.split(b"\n")[:-1]
        first = st.line
        if st.offset == 0 and raw and raw[0].startswith(BOM):
            raw[0] = raw[0][len(BOM):]
        st.offset += len(data)
        st.line += len(raw)
        rows = [(first + i, text) for i, text in enumerate(raw) if text.strip()]
        rep.bad += [line_too_long(self.path, n) for n, text in rows if len(text) > MAX_LINE_BYTES]
        rows = [(n, text) for n, text in rows if len(text) <= MAX_LINE_BYTES]
        rep.lines += len(rows)
        if not rows:
            return
        cols = [c for c in (self.preset.time, self.preset.input, self.preset.output) if c]
        chunk = Chunk(_json_columns(self.path, [t for _, t in rows], cols), first,
                      np.array([n for n, _ in rows], np.int64))
        parsed = parse_chunk(chunk, self.preset, self.tz, 0, self.store.window(self.dep))
        keep = np.ones(len(rows), bool)
        why: dict[int, list[str]] = {}
        for row, col, reason, value in parsed.bad:
            keep[row] = False
            why.setdefault(row, []).append(f"column {col!r}: {reason}" + (f" ({shown(value)})" if value else ""))
        rep.bad += [f"{self.path}:{chunk.line(row)}: " + "; ".join(texts) for row, texts in sorted(why.items())]
        self._count(st, rep, parsed, keep)

    def _count(self, st: FollowState, rep: PollReport, parsed: Any, keep: np.ndarray) -> None:
        minutes = parsed.ns // NS_PER_MIN
        zeros = np.zeros(len(minutes))
        inp = parsed.inp if parsed.inp is not None else zeros
        out = parsed.out if parsed.out is not None else zeros
        for i in np.flatnonzero(keep):
            m = int(minutes[i])
            if st.written is not None and m <= st.written:
                rep.late += 1
                continue
            acc = st.open.setdefault(m, [0.0, 0.0, 0.0])
            acc[0] += 1.0
            acc[1] += float(np.nan_to_num(inp[i]))
            acc[2] += float(np.nan_to_num(out[i]))

    def _write_complete(self, st: FollowState, rep: PollReport, now_s: float) -> None:
        last_complete = int((now_s - self.grace_s) // 60) - 1
        if not st.open and st.written is None:
            return
        first = st.written + 1 if st.written is not None else min(st.open)
        if last_complete < first:
            return
        rows, line = {}, st.last_line
        for m in range(first, last_complete + 1):
            if m in st.open:
                rows[m], line = st.open[m], m
            elif line is not None and m - line <= self.silence_min:
                rows[m] = [0.0, 0.0, 0.0]  # the gateway logs every request: no line, no request
            elif line is not None and m - line == self.silence_min + 1:
                rep.silent_since = line  # the first minute left missing: said once per silence
        if rows:
            minutes = np.array(sorted(rows), np.int64)
            idx = pd.DatetimeIndex(pd.to_datetime(minutes * 60, unit="s"), name="time")
            frame = pd.DataFrame([rows[m] for m in minutes.tolist()], index=idx,
                                 columns=["requests", "input_tokens", "output_tokens"])
            if not (self.preset.input or self.preset.output):
                frame = frame[["requests"]]
            rep.minutes_written = self.store.upsert_frame(self.dep, frame)
        st.written, st.last_line = last_complete, line
        st.open = {m: v for m, v in st.open.items() if m > last_complete}
