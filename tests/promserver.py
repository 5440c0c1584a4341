"""A real Prometheus server for the tests (Debian package ``prometheus``), one launcher for all.

It scrapes every second, either fixed targets (``static``) or the targets written with
:meth:`Prometheus.targets` (file-based discovery: it picks the file up as it changes, as it
would a fleet's); ``extra`` adds top-level config (rule files, alerting) and ``flags`` command
line flags; ``scrape_s`` the scrape interval (and timeout).  Missing binary: tests marked ``NEEDS_PROMETHEUS`` skip, which tests/conftest.py
turns into a failure on CI.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Sequence

import httpx
import pytest

from warmcast.runtime import free_loopback_port, wait_until

PROMETHEUS = shutil.which("prometheus")
NEEDS_PROMETHEUS = pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (apt-get install prometheus; "
                                                                  "scripts/setup-prometheus.sh)")


class Prometheus:
    def __init__(self, tmp: Path, job: str = "vllm", static: Sequence[str] | None = None, extra: str = "",
                 flags: Sequence[str] = (), scrape_s: int = 1) -> None:
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sd = tmp / "prom-targets.json"
        self.sd.write_text("[]")
        if static is not None:
            hosts = ", ".join(f"'{u.removeprefix('http://')}'" for u in static)
            discovery = f"    static_configs:\n      - targets: [{hosts}]\n"
        else:
            discovery = f"    file_sd_configs:\n      - files: ['{self.sd}']\n        refresh_interval: 2s\n"
        (tmp / "prom.yml").write_text(
            f"global:\n  scrape_interval: {scrape_s}s\n  scrape_timeout: {scrape_s}s\n  evaluation_interval: 1s\n"
            + extra
            + f"scrape_configs:\n  - job_name: {job}\n" + discovery)
        self.log = tmp / "prom.log"
        self.proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp / 'prom.yml'}",
                                      f"--storage.tsdb.path={tmp / 'prom-data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", *flags],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"), start_new_session=True)
        if not wait_until(self._ready, 60):
            self.stop()
            raise AssertionError(f"Prometheus on {self.url} not ready after 60 s ({self.log})")

    def query(self, expr: str) -> list[dict]:
        return httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()["data"]["result"]

    def diagnosis(self) -> str:
        """What Prometheus saw, for a failure message: its targets' health and its alerts."""
        try:
            targets = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
            alerts = httpx.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        except (httpx.HTTPError, KeyError, ValueError) as err:
            return f"prometheus unreadable: {err}"
        health = [(t["scrapeUrl"], t["health"], t.get("lastError"), t.get("lastScrapeDuration")) for t in targets]
        return f"targets: {health}\nalerts: {[(a['labels'].get('alertname'), a['state'], a.get('activeAt')) for a in alerts]}"

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def targets(self, urls: list[str]) -> None:
        tmp = self.sd.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": [u.removeprefix("http://") for u in urls]}]))
        tmp.replace(self.sd)  # atomic: Prometheus never reads half a file

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
