"""Checks on a command's output paths, made before the command does its work: a replay or a report
that ran for minutes and then failed to write (an ``--out`` that is a file) showed a traceback and
lost the run (issue 41)."""
from __future__ import annotations

import os
from pathlib import Path

from warmcast.errors import InputError
from warmcast.text import shown


def out_dir(path: Path, flag: str = "--out") -> Path:
    """``path`` as a directory the command may write into (it may not exist yet: it is created only
    when the command writes, so a run refused later leaves nothing behind); InputError naming
    ``flag`` for a file, a path under a file, or a place this user cannot write."""
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {shown(str(path))} is not a directory (a file of that name exists); "
                         "give a directory for the outputs")
    parent = path
    while not parent.exists():   # the nearest existing ancestor is where the directory would be made
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{flag} {shown(str(path))}: {shown(str(parent))} is a file, so the directory "
                         "cannot be made under it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {shown(str(path))}: {shown(str(parent))} is not writable by this user")
    return path
