"""The files of one ingest call: parts of one log, never one file twice, never two parts that overlap.

``warmcast ingest a.log b.log`` folds every file into one accumulator, so a file given twice (the
same path, or a copy under another name) or two parts of a request log whose times overlap were
counted twice without a word (issue 41).  A request log is one row per request: rows of the same
time in two files are two requests only if the files come from two sources, and the operator, not
warmcast, knows that; both cases are refused, naming both files, and the message says what to do.
A count series repeated across files is summed and said in the report, as before.

Across calls: a request log's last minute is not stored (the log ends inside it).  Its counts are kept
as a :class:`Carry`, and the next call's first minute, when it is that minute and its first request
comes after the carried ones (the next part of a log split mid-minute), is joined to it, so the minute
is stored whole: never the later part's share alone (issue 41: 10 of 12 requests stored).  Where the
carry is kept (Redis) is ``warmcast.logparts``'s business; here it is a value.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from warmcast.errors import InputError

HASH_BLOCK = 1 << 20


def refuse_same_files(paths: list[Path]) -> None:
    """Refuse two entries of ``paths`` that are one file (same path, a link to it) or hold the same bytes."""
    seen: dict[tuple[int, int], Path] = {}
    sizes: dict[int, list[Path]] = {}
    for path in paths:
        info = os.stat(path)
        first = seen.setdefault((info.st_dev, info.st_ino), path)
        if first is not path:
            raise InputError(f"{first} and {path} are the same file: its rows would be counted twice; "
                             "pass each file once; nothing was stored")
        sizes.setdefault(info.st_size, []).append(path)
    for same_size in (group for group in sizes.values() if len(group) > 1):
        digests: dict[str, Path] = {}
        for path in same_size:  # only files of equal size are read twice
            first = digests.setdefault(_digest(path), path)
            if first is not path:
                raise InputError(f"{first} and {path} have the same content: the rows would be counted twice; "
                                 "pass each file once; nothing was stored")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


@dataclass
class Spans:
    """The first and last request time of each file of a call, to find parts that overlap."""

    by_file: dict[str, list[int]] = field(default_factory=dict)  # file -> [first ns, last ns]

    def add(self, path: Path, first_ns: int, last_ns: int) -> None:
        span = self.by_file.setdefault(str(path), [first_ns, last_ns])
        span[0], span[1] = min(span[0], first_ns), max(span[1], last_ns)

    def refuse_overlaps(self) -> None:
        """Two request-log files whose time ranges overlap (one ending exactly where the next starts
        does not: a log cut between two requests of the same instant)."""
        ordered = sorted(self.by_file.items(), key=lambda kv: kv[1][0])
        widest = None  # the file, among those starting earlier, that reaches latest
        for name, (start, end) in ordered:
            if widest is not None and start < widest[1][1]:
                (a, (a0, a1)), (b0, b1) = widest, (start, end)
                raise InputError(
                    f"{a} ({_when(a0, a1)}) and {name} ({_when(b0, b1)}) overlap: the requests of "
                    f"{_when(b0, min(a1, b1))} would be counted twice. Pass each part of a log once, parts that "
                    "follow each other; if the two files are two sources' logs of one deployment (two gateways), "
                    "concatenate them into one file first; nothing was stored")
            if widest is None or end > widest[1][1]:
                widest = (name, (start, end))


def _when(first_ns: int, last_ns: int) -> str:
    a, b = pd.Timestamp(first_ns), pd.Timestamp(last_ns)
    return f"{a:%Y-%m-%d %H:%M:%S} .. {b:%H:%M:%S}" if a.normalize() == b.normalize() else \
        f"{a:%Y-%m-%d %H:%M:%S} .. {b:%Y-%m-%d %H:%M:%S}"


@dataclass(frozen=True)
class Carry:
    """The minute a request log ended inside, as read: what the next part joins to its first minute."""

    minute: int  # minutes since the epoch
    last_ns: int  # the last request's time: the next part continues the log if it starts at or after it
    requests: float
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    hist: dict[int, int] = field(default_factory=dict)  # context-length histogram bin -> requests

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str | bytes) -> "Carry":
        d = json.loads(raw)
        return cls(int(d["minute"]), int(d["last_ns"]), float(d["requests"]), float(d["input_tokens"]),
                   float(d["output_tokens"]), {int(k): int(v) for k, v in d["hist"].items()})

    def continued_by(self, first_minute: int, first_ns: int) -> bool:
        """Whether a log whose first request is at ``first_ns`` is the next part of this one."""
        return first_minute == self.minute and first_ns >= self.last_ns
