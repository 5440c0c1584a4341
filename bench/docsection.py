"""Benchmarks write their own sections of docs/BENCHMARKS.md, so no figure there is typed by hand.

A section lies between two markers, ``<!-- bench:NAME begin -->`` and ``<!-- bench:NAME end -->``;
:func:`write_section` replaces what lies between them (or appends the section, markers and all,
when the document has none yet).  Every section a script writes starts with the command and the
machine's load average when it began (:func:`provenance`).
"""
from __future__ import annotations

import io
import os
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "BENCHMARKS.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name} begin -->", f"<!-- bench:{name} end -->"


def write_section(name: str, body: str, doc: Path = DOC) -> None:
    """Put ``body`` between the section's markers in ``doc`` (appended when they are not there)."""
    begin, end = markers(name)
    text = doc.read_text() if doc.exists() else ""
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text and text.index(begin) < text.index(end):
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def command_line() -> str:
    """This process's command, as a person would type it in the checkout."""
    return " ".join(shlex.quote(a) for a in [".venv/bin/python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])


def provenance(load_at_start: float, command: str) -> str:
    """The command that produced a section, when it was written, and the load average when the run
    began (2 cores: figures from a loaded machine are not speed figures)."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (f"Written by the script itself (`bench/docsection.py`), {when}; load average {load_at_start:.2f} "
            f"when the run began. Command:\n\n    {command}\n")


def add_doc_option(ap: Any) -> None:
    """The ``--doc`` option every benchmark shares: where its section goes ('none': print only)."""
    ap.add_argument("--doc", default=str(DOC), help="write this run's section into this document ('none': print only)")


def publish(doc: str, name: str, body: str) -> None:
    """Write section ``name`` into ``doc`` unless it is 'none', and say so."""
    if doc != "none":
        write_section(name, body, Path(doc))
        print(f"section bench:{name} written into {doc}")


class _Tee(io.TextIOBase):
    """stdout that also keeps what went through it."""

    def __init__(self, out: Any) -> None:
        self.out, self.buf = out, io.StringIO()

    def write(self, s: str) -> int:
        self.out.write(s)
        return self.buf.write(s)

    def flush(self) -> None:
        self.out.flush()


@contextmanager
def printed_into(doc: str, name: str, load: float, command: str) -> Iterator[None]:
    """What the block prints goes to stdout and, when the block ends without an error, into section
    ``name`` as printed (for benchmarks whose report is their printed tables)."""
    tee, old = _Tee(sys.stdout), sys.stdout
    sys.stdout = tee
    try:
        yield
    finally:
        sys.stdout = old
    publish(doc, name, provenance(load, command) + "\n```\n" + tee.buf.getvalue().strip("\n") + "\n```")
