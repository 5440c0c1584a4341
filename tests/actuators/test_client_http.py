"""Client transport behaviour (retries, permanent errors, bearer token) and the PromQL it sends,
against a real local HTTP server standing in for a misbehaving instance / a Prometheus API.

The real-vLLM behaviour is covered by tests/integration; here the server answers
what a vLLM behind a flaky proxy or a Prometheus API would, so every branch runs.
"""
from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from warmcast.errors import InputError
from warmup.actuators.prometheus import PrometheusError, PrometheusSignals, quantile_query, queries
from warmup.actuators.vllm_client import InstanceError, InstanceUnavailable, VLLMClient, for_each

METRICS = (Path(__file__).parents[1] / "integration" / "data" / "vllm-0.32.0-cpu-metrics.txt").read_text()


class _Handler(BaseHTTPRequestHandler):
    script: dict[str, list[tuple[int, str, dict[str, str]]]] = {}
    seen: list[tuple[str, dict[str, list[str]], str | None]] = []

    def _answer(self) -> None:
        u = urlparse(self.path)
        type(self).seen.append((u.path, parse_qs(u.query), self.headers.get("Authorization")))
        queue = type(self).script.get(u.path)
        status, body, headers = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else (404, "nope", {})
        data = body.encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *a: Any) -> None:
        pass


@pytest.fixture()
def http():
    _Handler.script, _Handler.seen = {}, []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_transient_failures_are_retried_then_succeed(http):
    _Handler.script = {"/metrics": [(503, "busy", {}), (429, "slow down", {"Retry-After": "0.01"}),
                                    (200, METRICS, {"Content-Type": "text/plain"})]}

    async def read_metrics_through_retries():
        async with VLLMClient(http, name="flaky", token="tok", retries=3, backoff_s=0.01) as c:
            return await c.metrics()

    snap = asyncio.run(read_metrics_through_retries())
    assert snap.instance == "flaky" and snap.counter("vllm:request_success_total") == 32
    assert len(_Handler.seen) == 3 and all(s[2] == "Bearer tok" for s in _Handler.seen)


def test_retries_exhausted_and_permanent_errors_name_the_instance(http):
    _Handler.script = {"/metrics": [(502, "bad gateway", {})], "/v1/models": [(401, "unauthorized", {})],
                       "/health": [(200, "", {})]}

    async def probe_failures():
        async with VLLMClient(http, name="inst-7", retries=2, backoff_s=0.01) as c:
            with pytest.raises(InstanceUnavailable, match=r"inst-7.*2 attempt.*502"):
                await c.metrics()
            with pytest.raises(InstanceError, match=r"inst-7.*401") as e:
                await c.models()
            assert e.value.status == 401 and not isinstance(e.value, InstanceUnavailable)
            results = await for_each([c], lambda x: x.metrics())
            return results

    (r,) = asyncio.run(probe_failures())
    assert not r.ok and "inst-7" in r.error
    assert [p for p, _, _ in _Handler.seen].count("/v1/models") == 1  # 4xx is not retried


def test_non_vllm_metrics_is_a_clear_error(http):
    _Handler.script = {"/metrics": [(200, "# TYPE up gauge\nup 1\n", {})]}

    async def read_non_vllm_metrics():
        async with VLLMClient(http, name="proxy") as c:
            await c.metrics()

    with pytest.raises(InstanceError, match="proxy.*no vllm"):
        asyncio.run(read_non_vllm_metrics())


def test_sleep_probe_without_dev_mode(http):
    async def probe_sleep():
        async with VLLMClient(http, name="plain") as c:
            return await c.sleep_support()

    s = asyncio.run(probe_sleep())
    assert not s.available and "VLLM_SERVER_DEV_MODE=1" in s.reason


def _vector(v: str | None) -> str:
    result = [] if v is None else [{"metric": {}, "value": [1700000000.0, v]}]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def test_promql_text():
    q = queries('model_name="llama"', window="1m")
    assert q["waiting"] == 'sum(vllm:num_requests_waiting{model_name="llama"})'
    assert q["kv_cache_usage"] == ('max(vllm:kv_cache_usage_perc{model_name="llama"}) or '
                                   'max(vllm:gpu_cache_usage_perc{model_name="llama"})')
    assert q["ttft_p99"] == ('histogram_quantile(0.99, sum by (le) '
                             '(rate(vllm:time_to_first_token_seconds_bucket{model_name="llama"}[1m])))')
    assert quantile_query("vllm:e2e_request_latency_seconds", 0.5, "", None) == \
        "histogram_quantile(0.5, sum by (le) (vllm:e2e_request_latency_seconds_bucket))"
    with pytest.raises(InputError):
        quantile_query("m", 0.5, "", "1 minute")


def test_prometheus_answers_parsed(http):
    _Handler.script = {"/api/v1/query": [(200, _vector("7"), {}), (200, _vector("NaN"), {}), (200, _vector(None), {}),
                                         (400, json.dumps({"status": "error", "errorType": "bad_data",
                                                           "error": "parse error"}), {})]}

    async def query_prometheus():
        async with PrometheusSignals(http, 'job="vllm"') as p:
            a = await p.queue_depth()
            b = await p.ttft_quantile(0.99)
            c = await p.running()
            with pytest.raises(PrometheusError, match="parse error"):
                await p.query("sum(")
            return a, b, c

    assert asyncio.run(query_prometheus()) == (7.0, None, None)
    assert _Handler.seen[0][1]["query"] == ['sum(vllm:num_requests_waiting{job="vllm"})']


def test_warmup_spec_from_core_decision():
    from warmup.actuators.vllm_client import WarmupSpec
    from warmup.core import Reason, ReasonCode, WarmupAction, WarmupDecision

    d = WarmupDecision(action=WarmupAction.START, reason=Reason(next(iter(ReasonCode)), "queue 12 > 5"),
                       requests_per_instance=6, concurrency=3, duration_s=45.0, instances=("a",))
    assert WarmupSpec.of(d) == WarmupSpec(count=6, concurrency=3, duration_s=45.0)
    assert WarmupSpec.of(WarmupSpec(count=2)) == WarmupSpec(count=2)


def _held(running: int, waiting: int) -> str:
    return (METRICS.replace('vllm:num_requests_running{engine="0",model_name="/tmp/tiny"} 0.0',
                            f'vllm:num_requests_running{{engine="0",model_name="/tmp/tiny"}} {running}.0')
            .replace('vllm:num_requests_waiting{engine="0",model_name="/tmp/tiny"} 0.0',
                     f'vllm:num_requests_waiting{{engine="0",model_name="/tmp/tiny"}} {waiting}.0'))


def test_settle_waits_for_no_request_held_and_a_cut_wait_says_how_many_remain(http):
    """Calibration's wait before a step, on each answer a server can give: requests held then none
    (it waits), held past the limit (it says how many), no /metrics (it says so at once).  The real
    server's side: tests/integration/test_vllm_server.py."""
    from warmup.calibration.runner import settle

    async def waits(limit_s: float):
        async with VLLMClient(http, name="busy", retries=1) as c:
            return await settle(c, limit_s, poll_s=0.01)

    ok = (200, _held(0, 0), {})
    _Handler.script = {"/metrics": [(200, _held(2, 5), {}), (200, _held(1, 0), {}), ok]}
    done = asyncio.run(waits(30.0))
    assert done.held == 0 and len(_Handler.seen) == 3
    _Handler.script, _Handler.seen = {"/metrics": [(200, _held(2, 5), {})]}, []
    cut = asyncio.run(waits(0.2))
    assert cut.held == 7 and cut.waited_s >= 0.2 and len(_Handler.seen) > 2
    _Handler.script = {"/metrics": [(500, "boom", {})]}
    gone = asyncio.run(waits(30.0))
    assert gone.held is None and gone.waited_s < 5
