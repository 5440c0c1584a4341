"""The dashboard in a real headless Chromium against a real uvicorn with data in real Redis.

Checks the chart rendered (the page writes the number of points it drew into
``body[data-rendered]``) and keeps a screenshot in test-artifacts/dashboard.png.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

from api_helpers import END, WRITE, stored_forecast, synthetic_frame
from warmcast.runtime import free_loopback_port as _free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                "--disable-dev-shm-usage"]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium on this machine (apt-get install -y chromium)")




@pytest.fixture
def server(settings, tmp_path):
    port = _free_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": settings.redis_url, "WARMCAST_KEY_PREFIX": settings.key_prefix,
           "WARMCAST_STATE_DIR": str(settings.state_dir), "WARMCAST_MODELS_DIR": str(settings.models_dir),
           "WARMCAST_API_TOKEN": WRITE, "PYTHONPATH": str(ROOT)}
    env.pop("WARMCAST_API_READ_TOKEN", None)
    log = open(tmp_path / "uvicorn.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app", "--host", "127.0.0.1",
                          "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            raise AssertionError("uvicorn did not start: " + (tmp_path / "uvicorn.log").read_text())
        time.sleep(0.2)
    yield url
    os.killpg(p.pid, signal.SIGTERM)
    p.wait(timeout=20)


def _seed(store, state) -> None:
    store.upsert_frame("demo", synthetic_frame(days=2))
    state.put_forecast("demo", stored_forecast(level=110), trained_at="2024-01-07 23:00:00")
    for i in range(240, 0, -1):  # four hours of planner ticks; actual follows desired after a 15-min cold start
        t = END - pd.Timedelta(minutes=i)
        state.record_fleet("demo", t, 1 + (i <= 120) + (i <= 45), 1 + (i <= 105) + (i <= 30))
    # the planner's stored plan for the next 30 minutes (the workers write this key)
    state.put("plan", "demo", {"desired": 3, "steps": [
        {"time": (END + pd.Timedelta(minutes=k)).strftime("%Y-%m-%d %H:%M:%S"), "desired": 3 + (k >= 15)}
        for k in range(30)]})
    state.audit("demo", "scale", "up 1->2", "forecast P90 needs 2", True, ts=END - pd.Timedelta(minutes=120))
    state.audit("demo", "warmup", "start medium", "queue depth 12 > 10", True, ts=END - pd.Timedelta(minutes=90))
    state.audit("demo", "switch", "prewarm night", "schedule window night starts 22:00", True,
                ts=END - pd.Timedelta(minutes=60))
    state.audit("demo", "scale", "up 2->3", "forecast P90 needs 3", True, ts=END - pd.Timedelta(minutes=45))
    state.audit("demo", "scale", "hold", "no change", False, ts=END - pd.Timedelta(minutes=30))


def _run(chrome: str, tmp_path: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chrome-{time.monotonic_ns()}"  # a fresh profile every run
    return subprocess.run([chrome, *CHROME_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_dashboard_renders_band_replicas_and_events(server, store, state, tmp_path):
    chrome = _chromium()
    _seed(store, state)
    page = f"{server}/?deployment=demo&refresh=2"
    dom = _run(chrome, tmp_path, "--virtual-time-budget=15000", "--dump-dom", page)
    m = re.search(r'data-rendered="([^"]*)"', dom.stdout)
    assert m and m.group(1), f"chart not rendered:\n{dom.stdout[-2000:]}\n{dom.stderr[-2000:]}"
    counts = json.loads(m.group(1).replace("&quot;", '"'))
    assert counts["load"] == 240  # the four hours before the forecast origin (the window asked for)
    assert counts["band"] == 30 and counts["p50"] == 30
    assert counts["desired"] == 240 and counts["actual"] == 240 and counts["planned"] == 30
    assert counts["events"] == 4  # two scale actions, a warmup, a switch; the "hold" is not an action
    refreshes = int(re.search(r'data-refreshes="(\d+)"', dom.stdout).group(1))
    assert refreshes >= 3  # it polls by itself: 15 s of page time at a 2 s refresh
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    _run(chrome, tmp_path, "--virtual-time-budget=15000", "--window-size=1280,900", f"--screenshot={shot}", page)
    assert shot.is_file() and shot.stat().st_size > 10_000
