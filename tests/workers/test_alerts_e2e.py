"""Tiered alert responses end to end with REAL components: a vLLM CPU server started through the
local-process backend, Prometheus scraping it and evaluating the rules `warmcast alerts rules`
wrote (short `for:` and windows), Alertmanager posting to the real API (uvicorn), a real Celery
worker running the alert step, and an HTTP sink standing in for the on-call hook.

Overload the server until the TTFT rule fires -> the primary response exactly once (report in
the sink, max-num-seqs adjustment audited); keep it overloaded past the primary window -> medium
tier (a standby vLLM server started through the local backend); remove the load -> resolved,
and the audit shows the episode.  Prometheus and Alertmanager missing: a skip, which
tests/conftest.py turns into a failure on CI.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from alertsink import Sink
from promserver import PROMETHEUS, Prometheus
from loophelpers import NEEDS_VLLM, PY, ROOT, VLLM_PY, ctx_for, free_port, wait_for
from warmcast.runtime import wait_until
from test_e2e_vllm import _load, _renice_servers, _wait_healthy

pytestmark = NEEDS_VLLM
TOKEN = "alerts-e2e-token"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

DEPLOYMENTS = """
deployments:
  - name: vdep
    model: dummy
    min_replicas: 1
    max_replicas: 2
    cold_start_min: 2
    scaler: {{kind: local, python: {python}, base_port: {port}}}
    profiles:
      day: {{capacity_rpm: 300, engine_args: {{max-num-seqs: 1}}}}
    slo: {{ttft_p99_ms: 1000}}
    alerts: {{report_url: "{sink}/report", primary_window_min: 0.5, late_copy_s: 3}}
"""


def _start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _configs(tmp: Path, env: dict[str, str], api: str, am_port: int) -> str:
    """Writes the rules and Alertmanager's config; returns Prometheus's rule and alerting config."""
    rules = subprocess.run([PY, "-m", "warmcast.cli", "alerts", "rules", "--out", str(tmp / "rules.yml"),
                            "--interval", "1s", "--window", "30s", "--for-primary", "5s", "--for-medium", "1h",
                            "--for-severe", "1h", "--for-slow", "1h"], cwd=ROOT, env=env, capture_output=True,
                           text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    (tmp / "am.yml").write_text(
        "route: {receiver: warmcast, group_by: [deployment], group_wait: 1s, group_interval: 2s, "
        "repeat_interval: 5s}\n"
        f"receivers: [{{name: warmcast, webhook_configs: [{{url: '{api}/v1/alerts', send_resolved: true, "
        f"http_config: {{authorization: {{credentials: {TOKEN}}}}}}}]}}]\n")
    return (f"rule_files: ['{tmp / 'rules.yml'}']\n"
            f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}\n")


def _server_logs(loop) -> str:
    """The tail of every local vLLM server's log, for a failure message."""
    from warmup.actuators.launch import local_state_dir

    logs = sorted((local_state_dir(loop.env["WARMCAST_STATE_DIR"]) / "vllm-logs").glob("*"))
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.is_file())


def _services(tmp: Path, loop, server: str, procs: list[subprocess.Popen]) -> Prometheus:
    """The API (uvicorn), Alertmanager posting to it and Prometheus scraping ``server`` with the
    generated rules, started into ``procs`` (stopped by the caller) and up.

    Scrapes every 3 s with a 3 s timeout: the loaded server's /metrics can take seconds to answer
    on two cores, and a failed scrape leaves the TTFT rule without data.  Prometheus resends
    firing alerts every 3 s, so Alertmanager holds them 12 s (4 resends) before taking a late
    resend for a resolution; when it still does, the episode reopens (late_copy_s above)."""
    api_port, am_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    alerting = _configs(tmp, loop.env, api, am_port)
    procs.append(_start([PY, "-m", "uvicorn", "--factory", "api.app:create_app", "--host", "127.0.0.1",
                         "--port", str(api_port)], tmp / "api.log", loop.env))
    procs.append(_start([ALERTMANAGER, f"--config.file={tmp / 'am.yml'}", f"--storage.path={tmp / 'am'}",
                         f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], tmp / "am.log"))
    prom = Prometheus(tmp, static=[server], extra=alerting, flags=["--rules.alert.resend-delay=3s"], scrape_s=3)
    procs.append(prom.proc)
    wait_for(lambda: _up(f"{api}/healthz") and _up(f"http://127.0.0.1:{am_port}/-/ready"), 90,
             "API and Alertmanager", loop)
    return prom


def _wait(cond, what: str, loop, ctx, prom: Prometheus, timeout: float = 240) -> None:
    """``wait_for`` whose failure also says what Prometheus saw and what the alert step decided."""
    if not wait_until(cond, timeout, 1.0):
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{prom.diagnosis()}\n"
                             f"alert decisions: {_codes(ctx)}\n{loop.logs()}")


def _responses(ctx) -> list[str]:
    return [r["decision"] for r in reversed(ctx.state.audit_log("vdep", kind="alert-response", limit=100))
            if r["applied"]]


def _episode(ctx) -> dict:
    from workers.alerting.state import episodes

    return (episodes(ctx.r, ctx.prefix, "vdep") or [{"alertnames": []}])[0]


def _codes(ctx) -> list[str]:
    return [r["inputs"]["code"] for r in reversed(ctx.state.audit_log("vdep", kind="alert", limit=500))]


def _tokens_lasting(url: str, seconds: float) -> int:
    """Output tokens one request generates in about ``seconds`` on the server at ``url`` (from a
    timed 64-token request), kept within the tiny model's max-model-len of 1024."""
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    body = {"model": model, "prompt": list(range(10, 26)), "max_tokens": 64, "ignore_eos": True, "temperature": 0.0}
    httpx.post(f"{url}/v1/completions", json=body, timeout=120)  # the first request pays one-off costs
    t = time.monotonic()
    httpx.post(f"{url}/v1/completions", json=body, timeout=120).raise_for_status()
    return int(min(900, max(64, 64 * seconds / max(time.monotonic() - t, 1e-3))))


class Overload:
    """``_load`` (clients sending back to back) in a thread, until stopped."""

    def __init__(self, url: str, clients: int, max_tokens: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop_event: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, args=(url, clients, max_tokens), daemon=True)
        self.thread.start()

    def _run(self, url: str, clients: int, max_tokens: int) -> None:
        async def go():
            self.stop_event = asyncio.Event()
            await _load(url, clients, max_tokens, self.stop_event)

        self.loop.run_until_complete(go())

    def stop(self) -> None:
        if self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(timeout=120)


@pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None,
                    reason="no prometheus / prometheus-alertmanager (scripts/setup-prometheus.sh installs them)")
def test_ttft_alert_primary_once_then_standby_then_resolved(make_loop, tmp_path):
    sink = Sink()
    loop = make_loop(deployments=DEPLOYMENTS.format(python=VLLM_PY, port=free_port(), sink=sink.url),
                     env={"WARMCAST_WORKERS_SIMULATE": "0", "WARMCAST_API_TOKEN": TOKEN})
    ctx = ctx_for(loop)
    ctx.options = ctx.options.model_copy(update={"simulate": False})
    procs: list[subprocess.Popen] = []
    load = None
    try:
        ctx.scaler("vdep").scale_to(1, "test: the deployment's one server")
        server = ctx.scaler("vdep").inner.urls()[0]
        _wait_healthy(server, 300)
        _renice_servers(ctx)  # two cores: the engine must not starve Prometheus, the API and the worker
        prom = _services(tmp_path, loop, server, procs)
        loop.worker()

        # One sequence at a time: the other five clients queue.  Requests last about 0.6 s whatever
        # the machine's speed (a fixed 64 tokens ran so fast on a quiet machine that the TTFT
        # P99 stayed under the 1 s SLO), so the fifth in line waits about 3 s.
        load = Overload(server, clients=6, max_tokens=_tokens_lasting(server, 0.6))
        t0 = time.monotonic()
        _wait(lambda: {"primary report", "primary adjust"} <= set(_responses(ctx)), "the primary response",
              loop, ctx, prom)
        t_primary = time.monotonic() - t0
        [report] = sink.bodies("/report")
        assert report["tier"] == "primary" and report["alert"]["alertnames"]
        # the queue rule may open the group first; the TTFT rule then fires into the same episode
        _wait(lambda: "WarmcastTTFTHigh" in _episode(ctx)["alertnames"], "the TTFT rule", loop, ctx, prom)
        _wait(lambda: "medium standby" in _responses(ctx), "escalation to the medium tier", loop, ctx, prom)
        t_medium = time.monotonic() - t0
        assert [int(f[b"target"]) for _, f in ctx.r.xrange(f"{ctx.prefix}:actions:vdep")] == [1, 2]
        # the standby vLLM server, through the local backend (a CI run once found it gone: its log says why)
        assert len(ctx.scaler("vdep").inner.urls()) == 2, _server_logs(loop)

        load.stop()
        load = None
        t_stop = time.monotonic()
        # resolved now, not an earlier premature resolution that the episode undid
        _wait(lambda: _episode(ctx).get("resolved_at") and _codes(ctx)[-1] == "alert_resolved",
              "the alert to resolve", loop, ctx, prom)
        print(f"load start -> primary response {t_primary:.0f} s, -> medium standby {t_medium:.0f} s; "
              f"load removed -> resolved {time.monotonic() - t_stop:.0f} s; decisions "
              f"{dict(Counter(_codes(ctx)))}")  # shown with -s
        got = _responses(ctx)
        assert got.count("primary report") == 1 and got.count("primary adjust") == 1, got
        assert got[:3] == ["primary report", "primary adjust", "medium standby"], got
        assert len(sink.bodies("/report")) == 1
        codes = _codes(ctx)
        assert codes[0] == "alert_opened" and "alert_escalated" in codes and codes[-1] == "alert_resolved", codes
        adjust = [r for r in ctx.state.audit_log("vdep", kind="alert-response") if r["decision"] == "primary adjust"]
        assert "max-num-seqs 1 -> 2" in adjust[0]["outcome"]
        assert ctx.cfg("vdep").scaling.min_replicas == 1  # the standby floor is released
    finally:
        if load is not None:
            load.stop()
        for p in reversed(procs):
            _stop(p)
        loop.stop_all()
        sink.close()
        ctx.scaler("vdep").inner.close()  # adopts the servers from the state file and stops them
        for name in ("api.log", "am.log", "prom.log"):
            path = tmp_path / name
            if path.exists():
                print(f"--- {name}\n{path.read_text()[-2000:]}", file=sys.stderr)
