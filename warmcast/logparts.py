"""``warmcast ingest FILES``: a log into the load store, in one call or in parts over several.

A request log split mid-minute and ingested one part per call (issue 41) stored the later part's share
of the minute it was cut in as the whole minute (10 requests of 12), and a later part ingested again
replaced a minute stored whole with that share.  So, around ``aggregate_file``:

- the minute a request log ends inside is not stored (``warmcast.ingest``); its counts are kept here,
  ``P:ingest-carry:D`` (a :class:`~warmcast.ingest.parts.Carry`), replaced by each ingest of a request
  log in the same transaction as its minutes, so a refused or failed write changes neither;
- the next call's first minute is joined to it when that log continues the carried one (same minute,
  first request at or after the carried ones), and stored whole;
- otherwise a request log's first minute, which the log may start inside, never replaces a value already
  stored for that minute (the report says so): a part never cuts a minute stored whole.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from warmcast.errors import NotFoundError
from warmcast.ingest import aggregate_file
from warmcast.ingest.parts import Carry
from warmcast.ingest.report import IngestReport
from warmcast.store import LoadStore


def carry_key(store: LoadStore, deployment: str) -> str:
    return f"{store.prefix}:ingest-carry:{deployment}"


def read_carry(store: LoadStore, deployment: str) -> Carry | None:
    raw = store.r.get(carry_key(store, deployment))
    return None if raw is None else Carry.from_json(raw)


def ingest_files(store: LoadStore, deployment: str, files: list[Path], on_error: str = "fail",
                 progress: bool = False, **reading: Any) -> IngestReport:
    """Aggregate ``files`` (one log, or its parts in order) and store them for ``deployment``, joining a
    previous part's last minute; nothing is stored when the files are refused."""
    frame, report = aggregate_file(files, on_error=on_error, progress=progress, window=store.window(deployment),
                                   carry=read_carry(store, deployment), **reading)
    requests_log = report.first_minute is not None
    if requests_log and report.joined_requests is None:
        frame = _keep_stored_first_minute(store, deployment, frame, report)
    key = carry_key(store, deployment)

    def carry(pipe: Any) -> None:
        if report.carry is not None:
            pipe.set(key, report.carry.to_json())
        else:
            pipe.delete(key)

    store.upsert_frame(deployment, frame, resolution_min=report.resolution_min, also=carry if requests_log else None)
    report.finish(frame)
    return report


def _keep_stored_first_minute(store: LoadStore, deployment: str, frame: pd.DataFrame,
                              report: IngestReport) -> pd.DataFrame:
    """``frame`` without its first minute where the store holds that minute already: the log may start
    inside it (a later part of a log split mid-minute), so its count may be a part of the stored one."""
    first = report.first_minute
    if first not in frame.index:
        return frame
    try:
        stored = store.frame(deployment, first, first + pd.Timedelta(minutes=1), signals=("requests",))
    except NotFoundError:  # nothing stored for this deployment yet
        return frame
    if stored.empty or pd.isna(stored["requests"].iloc[0]):
        return frame
    report.kept_first = float(stored["requests"].iloc[0])
    return frame.drop(index=first)
