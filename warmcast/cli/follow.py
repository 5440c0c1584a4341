"""``warmcast ingest --follow``: the loop around :class:`warmcast.ingest.follow.Follower`."""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import typer

from warmcast.errors import InputError
from warmcast.cli.log_options import LogReading


def follow_access_log(settings: Any, deployment: str, files: list[Path], reading: LogReading, poll_s: float,
                      grace_s: float, once: bool, silence_min: int) -> None:
    """Poll the deployment's access log until SIGINT/SIGTERM (or once); each poll's summary on stdout
    when it wrote something, each skipped line on stderr."""
    from warmcast.ingest.follow import Follower
    from warmcast.ingest.formats import resolve_preset
    from warmcast.runtime import load_fleet, open_store

    path = _log_path(load_fleet(settings), deployment, files)
    kw = reading.kwargs()
    kw.pop("start", None)
    tz = kw.pop("tz")
    fmt = kw.pop("fmt")
    if fmt == "auto" and path.stat().st_size == 0:
        raise InputError(f"{path}: empty, so its format cannot be told yet: pass --format (e.g. openai)")
    _, preset = resolve_preset(fmt, path, **kw)
    follower = Follower(path, deployment, open_store(settings), preset, tz=tz, grace_s=grace_s,
                        silence_min=silence_min)
    stop = {"now": False}
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.update(now=True))
    typer.echo(f"following {path} for {deployment} (poll {poll_s:g} s, minutes written {grace_s:g} s after "
               "they end); Ctrl-C stops")
    while True:
        rep = follower.poll()
        for line in rep.bad:
            typer.echo(f"skipped {line}", err=True)
        if rep.minutes_written or rep.late or rep.rotated or rep.silent_since is not None or once:
            typer.echo(rep.summary())
            sys.stdout.flush()
        if once or stop["now"]:
            return
        time.sleep(poll_s)


def _log_path(fleet: Any, deployment: str, files: list[Path]) -> Path:
    """The log to follow: the one given, else the deployment's; the deployment must take its
    arrivals from it (two writers of one deployment's load would overwrite each other)."""
    dep = fleet.get(deployment)  # NotFoundError names the deployments configured
    if dep.signals.arrivals != "access_log":
        raise InputError(f"deployment {deployment!r} counts arrivals from its instances' counters; set "
                         "signals: {arrivals: access_log, access_log: PATH} in the deployments file to take "
                         "them from a gateway's access log")
    if len(files) > 1:
        raise InputError("--follow tails one access log")
    path = Path(files[0] if files else dep.signals.access_log)
    if not path.is_file():
        raise InputError(f"{path}: no such file (the access log to follow)")
    return path
