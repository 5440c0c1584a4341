"""Log formats: where each supported log keeps its fields, and telling them apart."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from warmcast.errors import InputError

Format = Literal["azure", "mooncake", "openai", "counts", "warmcast", "auto"]
OnError = Literal["fail", "skip"]


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


def detect_format(path: Path) -> str:
    """Guess the preset from the columns of the first record."""
    cols = peek_columns(path)
    for name in ("azure", "mooncake", "warmcast", "counts"):
        p = PRESETS[name]
        needed = [c for c in (p.time, p.input, p.output, p.count) if c]
        if all(c in cols for c in needed):
            return name
    if "created" in cols and ("usage.prompt_tokens" in cols or "usage" in cols):
        return "openai"
    raise InputError(f"{path}: cannot tell the log format from its columns {sorted(cols)[:12]}; "
                     "pass --format and, if needed, --time-col/--input-col/--output-col/--count-col")


MAX_HEADER_BYTES = 1 << 20


def peek_columns(path: Path) -> list[str]:
    """Column names from the header (CSV), the first record (JSONL) or the schema (Parquet)."""
    kind = file_kind(path)
    if kind == "parquet":
        return open_parquet(path).schema_arrow.names
    with open(path, encoding="utf-8-sig", errors="replace") as fh:  # -sig: a BOM is not part of a name
        first = fh.readline(MAX_HEADER_BYTES)
        while kind == "jsonl" and first and not first.strip():
            first = fh.readline(MAX_HEADER_BYTES)
    if len(first) >= MAX_HEADER_BYTES:
        raise InputError(f"{path}:1: first line is longer than {MAX_HEADER_BYTES:,} characters; "
                         "this is not a log warmcast reads (CSV with a header, JSON lines or Parquet)")
    if kind == "jsonl":
        try:
            return list(pd.json_normalize(json.loads(first)).columns)
        except (json.JSONDecodeError, AttributeError, TypeError):
            raise InputError(f"{path}:1: first record is not a JSON object") from None
    try:
        return [c.strip() for c in next(csv.reader([first.strip()]), [])]
    except csv.Error as err:
        raise InputError(f"{path}:1: header is not readable CSV ({err})") from None


def open_parquet(path: Path):
    """The file as a ParquetFile; InputError when it is not one (truncated, another format)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: not a readable Parquet file ({err}); is it truncated or another format?") from None


def file_kind(path: Path) -> str:
    suffix = "".join(path.suffixes[-2:]).lower()
    if suffix.endswith((".parquet", ".pq")):
        return "parquet"
    if suffix.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "csv"


def resolve_preset(fmt: str, path: Path, time_col: str | None = None, input_col: str | None = None,
                   output_col: str | None = None, count_col: str | None = None,
                   time_unit: str | None = None) -> tuple[str, Preset]:
    """The preset for a file, with any column mapping applied."""
    # --count-col only means something for a count series: it says which kind this log is
    name = ("counts" if count_col else detect_format(path)) if fmt == "auto" else fmt
    if name not in PRESETS:
        raise InputError(f"unknown format {fmt!r}; choose one of {sorted(PRESETS)} or auto")
    p = PRESETS[name]
    over = {k: v for k, v in dict(time=time_col, input=input_col, output=output_col,
                                  count=count_col, time_unit=time_unit).items() if v}
    if name == "counts" and not input_col:
        cols = peek_columns(path)
        over.setdefault("input", "input_tokens" if "input_tokens" in cols else None)
        over.setdefault("output", "output_tokens" if "output_tokens" in cols else None)
    return name, Preset(**{**p.__dict__, **over})
