"""Headless Chromium and a real uvicorn for the browser tests of the dashboard and the API docs."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

from api_helpers import WRITE, missing_tool
from warmcast.runtime import free_loopback_port
from warmcast.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                "--disable-dev-shm-usage"]
# Network off but loopback: no name resolves (a CDN cannot load), and anything that skips
# resolution goes to a proxy on a closed loopback port; loopback itself stays direct.
OFFLINE_FLAGS = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                 "--proxy-server=http://127.0.0.1:9"]  # loopback bypasses a proxy by default


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    missing_tool("Chromium (apt-get install -y chromium)")
    raise AssertionError("unreachable")  # missing_tool fails or skips


def run_chromium(chrome: str, tmp_path: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chrome-{time.monotonic_ns()}"  # a fresh profile every run
    return subprocess.run([chrome, *CHROME_FLAGS, *OFFLINE_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def serve_api(settings: Settings, tmp_path: Path, deployments_file: Path | None = None) -> Iterator[str]:
    """``uvicorn --factory api.app:create_app`` on a free loopback port; yields its URL, stops it after."""
    port = free_loopback_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": settings.redis_url, "WARMCAST_KEY_PREFIX": settings.key_prefix,
           "WARMCAST_STATE_DIR": str(settings.state_dir), "WARMCAST_MODELS_DIR": str(settings.models_dir),
           "WARMCAST_API_TOKEN": WRITE, "PYTHONPATH": str(ROOT)}
    env.pop("WARMCAST_API_READ_TOKEN", None)
    env.pop("WARMCAST_DEPLOYMENTS_FILE", None)
    if deployments_file is not None:
        env["WARMCAST_DEPLOYMENTS_FILE"] = str(deployments_file)
    log_path = tmp_path / f"uvicorn-{port}.log"
    with open(log_path, "w") as log:
        p = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app", "--host", "127.0.0.1",
                              "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, p, log_path)
        yield url
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=20)


def _wait_up(url: str, p: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            raise AssertionError("uvicorn did not start: " + log_path.read_text())
        time.sleep(0.2)


class Page:
    """One page in a headless Chromium driven over the DevTools protocol (to read laid-out boxes).

    ``with Page(chrome, tmp_path, url) as page: page.wait_for("expr"); page.eval("expr")``"""

    def __init__(self, chrome: str, tmp_path: Path, url: str, width: int = 1280, height: int = 900) -> None:
        self.port = free_loopback_port()
        self.log = tmp_path / f"chrome-{self.port}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [chrome, *CHROME_FLAGS, *OFFLINE_FLAGS, f"--user-data-dir={tmp_path / f'chrome-{self.port}'}",
                 f"--remote-debugging-port={self.port}", f"--window-size={width},{height}", url],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.ws = None
        self.next_id = 0

    def __enter__(self) -> "Page":
        import websocket

        deadline = time.monotonic() + 60
        while self.ws is None:
            try:
                pages = [t for t in httpx.get(f"http://127.0.0.1:{self.port}/json/list", timeout=2).json()
                         if t.get("type") == "page"]
                if pages:
                    self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30,
                                                          suppress_origin=True)
            except (httpx.HTTPError, OSError):
                pass
            if self.ws is None:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("Chromium did not start: " + self.log.read_text()[-3000:])
                time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ws is not None:
            self.ws.close()
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=20)

    def eval(self, expression: str):
        """The JSON value of a JavaScript expression in the page (promises are awaited)."""
        import json

        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": "Runtime.evaluate", "params": {
            "expression": expression, "returnByValue": True, "awaitPromise": True}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                result = msg["result"]
                if "exceptionDetails" in result:
                    raise AssertionError(f"{expression}: {result['exceptionDetails']}")
                return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while True:  # the page may not have a body yet: that is "not yet", not an error
            value = self.eval(f"(() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }})()")
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression}")
            time.sleep(0.2)
