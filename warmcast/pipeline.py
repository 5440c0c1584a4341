"""The quickstart job, end to end on the embedded defaults."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from warmcast.settings import Settings


def run_demo(settings: Settings, days: int, deployment: str, workdir: Path,
             echo: Callable[[str], None] = print) -> None:
    from warmcast.commands import summary_text
    from warmcast.generate import WorkloadSpec, write_request_log
    from warmcast.ingest import aggregate_file
    from warmcast.runtime import open_store, redis_url

    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "requests.csv"
    rows = write_request_log(log, WorkloadSpec(days=days))
    echo(f"1/3 generated {rows:,} synthetic requests over {days} days -> {log}")
    store = open_store(settings)
    frame, report = aggregate_file([log], progress=True)
    store.upsert_frame(deployment, frame)
    echo(f"2/3 ingested into Redis at {redis_url(settings)}\n{report.summary()}")
    echo("3/3 summary\n" + summary_text(store.frame(deployment), deployment, 24 * 60))
