"""``warmcast run --simulate``: Redis, worker, beat and API as real processes; Ctrl-C stops them all."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from loophelpers import ROOT, free_port, wait_for

pytestmark = pytest.mark.integration


def test_run_simulate_makes_forecasts_and_decisions_then_stops_on_ctrl_c(tmp_path, redis_server_url, key_prefix):
    api_port, metrics_port = free_port(), free_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("WARMCAST_DEPLOYMENTS_FILE", None)
    out = open(tmp_path / "run.out", "w")
    p = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "run", "--simulate", "--api-port", str(api_port),
                          "--metrics-port", str(metrics_port), "--status-every", "5"], cwd=ROOT, env=env,
                         stdout=out, stderr=subprocess.STDOUT)
    try:
        from warmcast.settings import load_settings
        from workers.context import Ctx
        from workers.options import WorkerOptions
        import redis

        ctx = Ctx(load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state"),
                  WorkerOptions(simulate=True), redis.Redis.from_url(redis_server_url))
        text = lambda: (tmp_path / "run.out").read_text()  # noqa: E731
        wait_for(lambda: ctx.state.get_forecast("demo"), 60, f"a forecast of the demo deployment\n{text()}")
        wait_for(lambda: ctx.state.audit_log("demo", kind="scale"), 60, f"a planning decision\n{text()}")
        row = ctx.state.audit_log("demo", kind="scale")[0]
        assert row["reason"] and row["applied"] and row["inputs"]["forecast_model"]
        wait_for(lambda: "plan:" in text(), 30, "a status line with the plan")
        r = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        assert 'warmcast_decisions_total{applied="true",deployment="demo",kind="scale"' in r.text
        if "API and dashboard" in text():
            wait_for(lambda: _ok(f"http://127.0.0.1:{api_port}/healthz"), 60, f"the API\n{text()}")
        p.send_signal(signal.SIGINT)  # Ctrl-C
        assert p.wait(timeout=40) in (0, 130), text()
        assert "stopped." in text()
        assert not _ok(f"http://127.0.0.1:{api_port}/healthz")
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
