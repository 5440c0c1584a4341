"""Readers: a file in, chunks of raw columns out, each row with its line in the file.

Blank lines are dropped here but still counted, so an error names the line an editor
shows.  A UTF-8 byte-order mark and CRLF line ends are read like plain UTF-8 and LF.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from warmcast.errors import InputError
from warmcast.ingest.formats import file_kind, open_parquet, peek_columns
from warmcast.text import clip

CSV_BLOCK_BYTES = 16 << 20
BOM = b"\xef\xbb\xbf"
# The longest line read (without its line end).  One request's record is far shorter; a longer
# line is refused, never parsed whole (issue 31: a 25 MB line once aborted the process).
MAX_LINE_BYTES = 1 << 20


def line_too_long(path: Path, line: int) -> str:
    return (f"{path}:{line}: line longer than {MAX_LINE_BYTES:,} bytes (the limit, "
            "warmcast.ingest.readers.MAX_LINE_BYTES): not one request's record")


def check_line_lengths(block: bytes, path: Path, line: int) -> None:
    """Refuse ``block`` (whole lines, the first being file line ``line``) if a line is over the limit."""
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == 10)
    starts = np.concatenate([[0], ends + 1])
    stops = np.concatenate([ends, [len(block)]])
    lengths = stops - starts - ((stops > starts) & (data[np.maximum(stops - 1, 0)] == 13))  # a CR ends a line too
    over = np.flatnonzero(lengths > MAX_LINE_BYTES)
    if len(over):
        raise InputError(line_too_long(path, line + int(over[0])) + "; nothing was stored")


@dataclass
class Chunk:
    """Raw columns of up to chunk_rows rows, as strings or numbers; line numbers for errors."""

    columns: dict[str, pa.Array]
    first_line: int  # file line number of the chunk's first row
    lines: np.ndarray | None = None  # each row's line, when blank lines were dropped in between

    def line(self, row: int) -> int:
        return int(self.lines[row]) if self.lines is not None else self.first_line + row

    def lines_of(self, rows: np.ndarray) -> np.ndarray:
        """The file lines of ``rows`` (indices into the chunk)."""
        return self.lines[rows] if self.lines is not None else self.first_line + np.asarray(rows, np.int64)


def read_chunks(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    readers = {"csv": _iter_csv, "jsonl": _iter_jsonl, "parquet": _iter_parquet}
    kind = file_kind(path)
    if kind != "parquet":
        check_line_ends(path)
    return readers[kind](path, cols, chunk_rows)


def check_line_ends(path: Path, peek_bytes: int = 1 << 16) -> None:
    """Refuse a text file whose lines end in CR alone (classic Mac OS): read by LF it is one line, and
    was stored as "0 rows" without a word (issue 31)."""
    with open(path, "rb") as fh:
        head = fh.read(peek_bytes)
    if b"\r" in head.rstrip(b"\r") and b"\n" not in head:
        raise InputError(f"{path}: lines end in CR alone (classic Mac OS line ends); convert them to LF or "
                         "CRLF (e.g. `tr '\\r' '\\n' < in.csv > out.csv`); nothing was stored")


def _iter_csv(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    """Parse the file in blocks of whole lines.  Reading the blocks ourselves, rather than
    with pyarrow's streaming reader, bounds memory: that reader reads far ahead."""
    import pyarrow.csv as pv

    header = peek_columns(path)
    missing = [c for c in cols if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; the file has {header}")
    opts = pv.ConvertOptions(include_columns=cols, column_types={c: pa.string() for c in cols},
                             strings_can_be_null=True)
    read = pv.ReadOptions(column_names=header, use_threads=True, block_size=1 << 22)
    # Empty lines come back as all-null rows, so row i of a block is its line i.
    parse = pv.ParseOptions(ignore_empty_lines=False)
    line = 2
    with open(path, "rb") as fh:
        fh.readline()
        while block := fh.read(CSV_BLOCK_BYTES):
            block += fh.readline(MAX_LINE_BYTES + 2)  # finish the last line of the block (if it is not too long)
            check_line_lengths(block, path, line)
            try:
                table = pv.read_csv(io.BytesIO(block), read_options=read, parse_options=parse,
                                    convert_options=opts)
            except pa.ArrowInvalid as err:
                raise InputError(unreadable_csv(block, path, line, len(header), err)) from None
            yield _without_blank_lines({c: table.column(c).combine_chunks() for c in cols}, block, line)
            line += block.count(b"\n")


def unreadable_csv(block: bytes, path: Path, line: int, n_cols: int, err: Exception) -> str:
    """What pyarrow refused in ``block`` (whole lines from file line ``line``), named by its own line:
    pyarrow names no line, and "after line 2" for a short row on line 300 sent the reader hunting (issue 41)."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as bad:
        at = line + block[:bad.start].count(b"\n")
        return f"{path}:{at}: not UTF-8 text; nothing was stored"
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1  # physical line (in the block) where the record being read starts
    for record in reader:
        if record and len(record) != n_cols:
            return (f"{path}:{line + start - 1}: {len(record)} fields where the header has {n_cols} "
                    f"(row {clip(','.join(record), 80)!r}); nothing was stored")
        start = reader.line_num + 1
    last = line + block.count(b"\n")
    return f"{path}: unreadable CSV in lines {line}-{last}: {clip(str(err), 200)}"


def _without_blank_lines(columns: dict[str, pa.Array], block: bytes, line: int) -> Chunk:
    """Drop the rows that are empty lines, keeping each remaining row's line number."""
    maybe = np.ones(len(next(iter(columns.values()))), bool)
    for arr in columns.values():
        maybe &= arr.is_null().to_numpy(zero_copy_only=False)
    if not maybe.any():
        return Chunk(columns, line)
    ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
    starts = np.concatenate([[0], ends + 1])[: len(maybe)]
    ends = np.concatenate([ends, [len(block)]])[: len(maybe)]
    length = ends - starts
    carriage = np.array([block[s:s + 1] == b"\r" for s in starts[maybe]])
    blank = np.zeros(len(maybe), bool)
    blank[maybe] = (length[maybe] == 0) | ((length[maybe] == 1) & carriage)
    keep = pa.array(~blank)
    return Chunk({c: a.filter(keep) for c, a in columns.items()}, line, line + np.flatnonzero(~blank))


def _iter_jsonl(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    line = 1
    with open(path, "rb") as fh:
        while True:
            raw = _jsonl_lines(fh, path, line, chunk_rows)
            if not raw:
                return
            if line == 1 and raw[0].startswith(BOM):
                raw[0] = raw[0][len(BOM):]
            rows = [(line + i, text) for i, text in enumerate(raw) if text.strip()]
            numbers = np.array([n for n, _ in rows], np.int64)
            yield Chunk(_json_columns(path, [t for _, t in rows], cols), line, numbers)
            line += len(raw)


def _jsonl_lines(fh, path: Path, line: int, chunk_rows: int) -> list[bytes]:
    """Up to ``chunk_rows`` lines, none read past the limit (a longer one is refused)."""
    raw = []
    while len(raw) < chunk_rows and (text := fh.readline(MAX_LINE_BYTES + 2)):
        if len(text.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise InputError(line_too_long(path, line + len(raw)) + "; nothing was stored")
        raw.append(text)
    return raw


def _json_record(text: bytes) -> dict:
    """One line as a record; a line that is not one becomes {'__bad__': why}."""
    try:
        rec = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        return {"__bad__": "not UTF-8 text"}
    except json.JSONDecodeError as err:
        return {"__bad__": f"not valid JSON ({err.msg})"}
    return rec if isinstance(rec, dict) else {"__bad__": f"not a JSON object (a {type(rec).__name__})"}


def _json_columns(path: Path, lines: list[bytes], cols: list[str]) -> dict[str, pa.Array]:
    records = [_json_record(text) for text in lines]
    flat = pd.json_normalize(records) if records else pd.DataFrame()
    out = {}
    for c in cols:
        vals = flat[c] if c in flat.columns else pd.Series([None] * len(records))
        out[c] = pa.array(vals.map(lambda v: None if v is None or v != v else str(v)), type=pa.string())
    if "__bad__" in flat.columns:
        out["__bad__"] = pa.array(flat["__bad__"].map(lambda v: v if isinstance(v, str) else None), type=pa.string())
    return out


def _iter_parquet(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    pf = open_parquet(path)
    missing = [c for c in cols if c not in pf.schema_arrow.names]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; the file has {pf.schema_arrow.names}")
    line = 1
    batches = pf.iter_batches(batch_size=chunk_rows, columns=cols)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError) as err:
            raise InputError(f"{path}: unreadable Parquet after row {line - 1} ({err}); "
                             "the file is truncated or corrupt") from None
        if batch is None:
            return
        yield Chunk({c: batch.column(c) for c in cols}, line)
        line += batch.num_rows
