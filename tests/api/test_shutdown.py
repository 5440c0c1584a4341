"""SIGTERM to `warmcast api serve` while uploads are in flight (issue 31: it answered 500): a request
that finishes within the graceful timeout completes; one still sending its body is answered 503 with
Retry-After and nothing of it is stored. A real uvicorn process, real Redis, bodies sent in slow chunks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pandas as pd

from api_helpers import AUTH, kill_if_alive
from warmcast.runtime import free_loopback_port

ROOT = Path(__file__).resolve().parents[2]
NOW = pd.Timestamp.now("UTC").floor("min").tz_localize(None)
GRACE_S = 10
SLOW_S = 2.0 * GRACE_S    # the slow bodies are still arriving when the grace ends


def _rows(first_ago: int, n: int) -> list[dict]:
    return [{"time": (NOW - pd.Timedelta(minutes=first_ago + i)).strftime("%Y-%m-%d %H:%M:%S"), "requests": 7.0}
            for i in range(n)]


def _slowly(body: bytes, seconds: float, pieces: int = 20):
    step = len(body) // pieces + 1
    for i in range(0, len(body), step):
        yield body[i:i + step]
        time.sleep(seconds / pieces)


def _post(url: str, body: bytes, content_type: str, seconds: float, key: str, out: dict) -> None:
    try:
        out[key] = httpx.post(url, content=_slowly(body, seconds), timeout=60,
                              headers={**AUTH, "content-type": content_type})
    except httpx.HTTPError as err:
        out[key] = err


def _multipart(test_start: str, csv: str) -> tuple[bytes, str]:
    b = "wcboundary"
    body = (f'--{b}\r\nContent-Disposition: form-data; name="test_start"\r\n\r\n{test_start}\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="log.csv"\r\n'
            f"Content-Type: text/csv\r\n\r\n{csv}\r\n--{b}--\r\n")
    return body.encode(), f"multipart/form-data; boundary={b}"


def _serve(settings, key_prefix: str, tmp_path: Path, grace_s: int) -> tuple[subprocess.Popen, str]:
    port = free_loopback_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": settings.redis_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "WARMCAST_MODELS_DIR": str(tmp_path / "models"),
           "WARMCAST_API_TOKEN": settings.api_token, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "api", "serve", "--port", str(port),
                             "--shutdown-grace-s", str(grace_s)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.3)
    kill_if_alive(proc)
    raise AssertionError(f"the API did not start: {proc.communicate()[0][-3000:]}")


def test_sigterm_during_uploads_completes_or_answers_503_and_stores_nothing_half(settings, store, key_prefix,
                                                                                 tmp_path):
    # The grace is 10 s here (3 s by default): on a loaded 2-core CI machine the quick request's route
    # once needed more than the default 3 s after its body arrived, and was answered 503 (correctly,
    # but this test is about one request that finishes and two that cannot).
    proc, base = _serve(settings, key_prefix, tmp_path, GRACE_S)
    quick, slow = _rows(2, 30), _rows(40, 60)
    csv = "time,requests\n" + "".join(f"{r['time']},7\n" for r in slow)
    upload, upload_type = _multipart(slow[30]["time"], csv)
    obs = f"{base}/v1/deployments/demo/observations"
    jobs = [(obs, json.dumps({"observations": quick}).encode(), "application/json", 2.0, "quick"),
            (obs, json.dumps({"observations": slow}).encode(), "application/json", SLOW_S, "slow"),
            (f"{base}/v1/deployments/demo/whatif/upload", upload, upload_type, SLOW_S, "upload")]
    out: dict = {}
    threads = [threading.Thread(target=_post, args=(*job, out)) for job in jobs]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)  # every body is half sent
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        log = proc.communicate(timeout=30)[0]
    finally:
        kill_if_alive(proc)
    assert isinstance(out["quick"], httpx.Response) and out["quick"].status_code == 200, (out["quick"], log[-3000:])
    for key in ("slow", "upload"):
        r = out[key]
        assert isinstance(r, httpx.Response), (key, r, log[-3000:])
        assert r.status_code == 503 and r.headers.get("retry-after") == "5", (key, r.status_code, r.text)
        assert "shutting down" in r.json()["detail"]
    assert " 500 " not in log and "Traceback" not in log, log[-3000:]
    stored = store.frame("demo")["requests"].dropna()
    assert sorted(stored.index.strftime("%Y-%m-%d %H:%M:%S")) == sorted(r["time"] for r in quick)
    uploads = tmp_path / "state" / "uploads"
    assert not uploads.exists() or list(uploads.iterdir()) == []
