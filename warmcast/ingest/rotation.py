"""Telling a followed log from its rotated copies (``warmcast ingest --follow``, issue 31).

A log rotates in three ways: renamed away with a new file created at the path (logrotate's
default), copied away and truncated in place (``copytruncate``), or deleted.  The follower keeps
the inode of the file it reads and a fingerprint of the bytes it has read from its start (at
most :data:`FP_BYTES`), so it can tell whether the file at the path is still that file (a
truncation regrown past the old offset keeps inode and size but not its first bytes) and, if
not, find where the unread tail went: the same inode under another name (renamed), or a file
whose first bytes match the fingerprint (the copy ``copytruncate`` made).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import BinaryIO

FP_BYTES = 4096  # bytes from the start of the file that identify it (its first lines carry their own times)


def head_hash(fh: BinaryIO, length: int) -> str:
    """Hash of the first ``length`` bytes of an open file ('' when fewer are there)."""
    fh.seek(0)
    head = fh.read(length)
    return hashlib.sha1(head).hexdigest() if len(head) == length else ""


def fingerprint(fh: BinaryIO, offset: int) -> tuple[str, int]:
    """(hash, length) of the bytes read so far from the start, up to FP_BYTES."""
    length = min(offset, FP_BYTES)
    return head_hash(fh, length), length


def is_same_file(fh: BinaryIO, inode: int | None, offset: int, fp: str, fp_len: int) -> bool:
    """Whether an open file is the one read up to ``offset`` (by inode where given, else by its first
    bytes alone): as long, and starting with the bytes that were read."""
    info = os.fstat(fh.fileno())
    if inode is not None and info.st_ino != inode:
        return False
    if info.st_size < offset:
        return False
    return fp_len == 0 or head_hash(fh, fp_len) == fp


def rotated_copies(path: Path) -> list[Path]:
    """Files beside ``path`` that logrotate may have made of it (access.jsonl.1, access-20240101.jsonl)."""
    stem = path.name.split(".")[0]
    try:
        entries = sorted(path.parent.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.name != path.name and p.name.startswith(stem) and p.is_file()]


def find_rotated(path: Path, inode: int, offset: int, fp: str, fp_len: int) -> BinaryIO | None:
    """The file that was read up to ``offset``, now under another name: the same inode first, else
    (a copytruncate) a copy that starts with the fingerprinted bytes; None when neither is there."""
    by_content = None
    for cand in rotated_copies(path):
        try:
            fh = open(cand, "rb")
        except OSError:
            continue
        if is_same_file(fh, inode, offset, fp, fp_len):
            if by_content is not None:
                by_content.close()
            return fh
        if by_content is None and fp_len and is_same_file(fh, None, offset, fp, fp_len):
            by_content = fh
            continue
        fh.close()
    return by_content
