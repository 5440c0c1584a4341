"""Readers: a file in, chunks of raw columns out, each with the file line of its first row."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow as pa

from warmcast.errors import InputError
from warmcast.ingest.formats import file_kind, peek_columns


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

    header = peek_columns(path)
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


def read_chunks(path: Path, cols: list[str], chunk_rows: int) -> Iterator[Chunk]:
    return _READERS[file_kind(path)](path, cols, chunk_rows)
