"""Issue 10's API findings, one test each, named after the finding (real Redis, real app).

Finding 3: unbounded query parameters pinned a core and SIGTERM did not stop the process.
Finding 7: NaN/Infinity in a JSON body and year-0 timestamps gave HTTP 500.
Finding 11: with no stored forecast every request computed the forecast itself.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from api_helpers import AUTH, synthetic_frame

ROOT = Path(__file__).resolve().parents[2]


def _app(settings, **config):
    from dataclasses import replace

    from api.app import create_app
    from api.deps import ApiConfig

    return create_app(settings, replace(ApiConfig.from_env(), **config))


async def _burst(app, path: str, n: int) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await asyncio.gather(*(client.get(path) for _ in range(n)))


def test_finding11_concurrent_requests_share_one_computation(settings, store):
    """No stored forecast: 30 concurrent requests cause one computation, and it is then reused."""
    store.upsert_frame("demo", synthetic_frame(days=1).iloc[-200:])  # short history: a quick fit
    app = _app(settings)
    ctx = app.state.ctx
    path = "/v1/deployments/demo/forecast?horizon=30"
    replies = asyncio.run(_burst(app, path, 30))
    assert [r.status_code for r in replies] == [200] * 30, replies[0].text
    assert {r.content for r in replies} == {replies[0].content}
    assert replies[0].json()["source"] == "computed"
    assert ctx.computations == 1
    # the computed forecast is reused (and by the routes that read forecasts too)
    asyncio.run(_burst(app, path, 10))
    asyncio.run(_burst(app, "/v1/deployments/demo/plan", 3))
    assert ctx.computations == 1
    # new observations make it out of date: the next request computes again, once
    frame = synthetic_frame(days=1).iloc[-200:]
    frame.index = frame.index + (frame.index[-1] - frame.index[0]) + (frame.index[1] - frame.index[0])
    rows = [{"time": t.strftime("%Y-%m-%d %H:%M:%S"), "requests": float(v)} for t, v in frame["requests"].items()]

    async def push_then_burst():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            r = await client.post("/v1/deployments/demo/observations", json={"observations": rows}, headers=AUTH)
            assert r.status_code == 200, r.text
            return await asyncio.gather(*(client.get(path) for _ in range(10)))

    again = asyncio.run(push_then_burst())
    assert {r.status_code for r in again} == {200} and ctx.computations == 2
    assert again[0].json()["origin"] != replies[0].json()["origin"]


def test_finding3_a_long_computation_has_a_deadline(settings, store):
    """A request waits at most deadline_s (503 + Retry-After); the computation goes on and is served."""
    store.upsert_frame("demo", synthetic_frame(days=1).iloc[-200:])  # a fit takes far longer than 50 ms
    app = _app(settings, deadline_s=0.05)
    ctx = app.state.ctx
    path = "/v1/deployments/demo/forecast?horizon=30"
    first = asyncio.run(_burst(app, path, 3))
    assert [r.status_code for r in first] == [503] * 3
    assert first[0].headers["retry-after"] and "still being computed" in first[0].json()["detail"]
    deadline = time.monotonic() + 900
    while ctx.inflight and time.monotonic() < deadline:
        time.sleep(0.5)
    later = asyncio.run(_burst(app, path, 2))
    assert [r.status_code for r in later] == [200, 200] and ctx.computations == 1
