"""Issue 10's API findings, one test each, named after the finding (real Redis, real app).

Finding 3: unbounded query parameters pinned a core and SIGTERM did not stop the process.
Finding 7: NaN/Infinity in a JSON body and year-0 timestamps gave HTTP 500.
Finding 11: with no stored forecast every request computed the forecast itself.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

from api_helpers import AUTH, kill_if_alive, sigterm_stop_seconds, STOP_BOUND_S, synthetic_frame

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


def test_finding11_an_expired_forecast_is_served_while_one_refresh_runs(settings, store):
    """Past cache_ttl_s the computed forecast is still answered at once while one refresh runs;
    with no newer load stored, the refresh keeps the forecast instead of fitting again."""
    store.upsert_frame("demo", synthetic_frame(days=1).iloc[-200:])
    app = _app(settings, cache_ttl_s=1.0)
    ctx = app.state.ctx
    path = "/v1/deployments/demo/forecast?horizon=30"
    first = asyncio.run(_burst(app, path, 1))[0]
    time.sleep(1.2)  # expired, still servable
    stale = asyncio.run(_burst(app, path, 5))
    # the age is now's, and a forecast reused with no newer load is restamped (issue 46: one staleness rule)
    unaged = lambda r: {k: v for k, v in r.json().items() if k not in ("age_s", "created_at")}  # noqa: E731
    for r in stale:
        a, b = unaged(r), unaged(first)
        assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    deadline = time.monotonic() + 300
    while ctx.inflight and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not ctx.inflight and ctx.computations == 1


def test_finding3_a_long_computation_has_a_deadline(settings, store):
    """A request waits at most deadline_s (503 + Retry-After); the computation goes on and is served."""
    store.upsert_frame("demo", synthetic_frame(days=1).iloc[-200:])  # a fit takes far longer than 50 ms
    app = _app(settings, deadline_s=0.001)  # far below any fit, however fast the machine
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


def _assert_422_naming(client, path: str, field: str) -> None:
    r = client.get(f"/v1/deployments/demo/{path}")
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"] == ["query", field] and ("outside" in err["msg"] or "not a timestamp" in err["msg"])


@pytest.mark.parametrize("path, field", [
    ("capacity?start=9999-01-01T00:00:00Z", "start"),
    ("capacity?start=1900-01-01", "start"),
    ("audit?until=9999-12-31", "until"),
])
def test_finding3_far_past_and_far_future_parameters_are_422_naming_the_field(client, seeded, path, field):
    _assert_422_naming(client, path, field)


def test_finding3_capacity_near_the_bounds_answers(client, seeded):
    """The bounds refuse only the absurd: a plan starting a year from now is still made."""
    start = (pd.Timestamp.now(tz="UTC") + pd.Timedelta(days=300)).strftime("%Y-%m-%dT%H:00:00Z")
    r = client.get("/v1/deployments/demo/capacity", params={"start": start, "span": "week"})
    assert r.status_code == 200, r.text
    assert len(r.json()["hours"]) == 7 * 24


@pytest.mark.parametrize("path, field", [("audit?since=0000-01-01", "since"), ("audit?since=-0001-01-01", "since")])
def test_finding7_year0_query_is_422_naming_the_field(client, seeded, path, field):
    """Timestamps before year 1 in a query string gave HTTP 500 (pandas cannot hold them)."""
    _assert_422_naming(client, path, field)


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity"])
def test_finding7_nan_and_infinity_in_a_json_body_are_422(client, seeded, store, raw):
    before = store.series("demo")
    body = '{"observations": [{"time": "2024-01-08 00:00:00", "requests": %s}]}' % raw
    r = client.post("/v1/deployments/demo/observations", content=body,
                    headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "observations", 0, "requests"] and "finite" in err["msg"]
    assert err["input"] == str(float(raw))  # echoed as a string: JSON has no such number
    r = client.post("/v1/deployments/demo/whatif", content='{"capacity_rpm": %s}' % raw,
                    headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert any(e["loc"][-1] == "capacity_rpm" and "finite" in e["msg"] for e in r.json()["detail"]), r.text
    assert store.series("demo").equals(before)


def test_finding3_api_stops_on_sigterm_during_a_long_request(settings, store, key_prefix, tmp_path):
    """SIGTERM while a request waits on a forecast computation: the process is gone within seconds."""
    import threading

    from warmcast.runtime import free_loopback_port

    store.upsert_frame("cold", synthetic_frame(days=2))  # no stored forecast: a full fit, seconds at least
    port = free_loopback_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": settings.redis_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "WARMCAST_MODELS_DIR": str(tmp_path / "models"),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "api", "serve", "--port", str(port)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        def ask() -> None:
            try:
                httpx.get(f"{base}/v1/deployments/cold/forecast", timeout=600)
            except httpx.HTTPError:
                pass  # the server going away under an open request is what this test does

        threading.Thread(target=ask, daemon=True).start()
        time.sleep(2)  # the request is in, waiting on the computation
        assert sigterm_stop_seconds(proc, 30) < STOP_BOUND_S
    finally:
        kill_if_alive(proc)


@pytest.mark.parametrize("query, field", [("horizon=31", "horizon"), ("horizon=0", "horizon"),
                                          ("horizon=ten", "horizon"), ("quantiles=switch", "quantiles"),
                                          ("quantiles=" + "0.5," * 30, "quantiles")])
def test_forecast_route_parses_its_own_query_and_names_the_bad_field(settings, store, query, field):
    """The forecast route parses its query itself (no FastAPI parameter solving, for speed):
    bad values are still 422 naming the field, never a 500, and the OpenAPI document lists them."""
    store.upsert_frame("demo", synthetic_frame(days=1).iloc[-200:])
    app = _app(settings)
    (reply,) = asyncio.run(_burst(app, f"/v1/deployments/demo/forecast?{query}", 1))
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["query", field]
    params = app.openapi()["paths"]["/v1/deployments/{deployment}/forecast"]["get"]["parameters"]
    assert {p["name"] for p in params} == {"deployment", "horizon", "quantiles"}


def test_round2_finding2_an_observation_for_a_minute_not_ended_is_refused_and_nothing_stored(settings, store):
    """Issue 31 finding 2: one observation at now + 2 h moved the live forecast's origin 2 h ahead."""
    app = _app(settings)
    now = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("min")
    past = [{"time": (now - pd.Timedelta(minutes=k)).strftime("%Y-%m-%d %H:%M:%S"), "requests": 100.0}
            for k in (3, 2)]
    ahead = {"time": (now + pd.Timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S"), "requests": 72.0}
    # the next minute: it ends 60-120 s from now, beyond the 30 s clock-skew allowance
    running = {"time": (now + pd.Timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S"), "requests": 5.0}

    async def push(rows):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.post("/v1/deployments/demo/observations", json={"observations": rows}, headers=AUTH)

    for bad in (ahead, running):
        r = asyncio.run(push(past + [bad]))
        assert r.status_code == 422 and "has not ended yet" in r.text and "nothing was stored" in r.text, r.text
    with pytest.raises(Exception):   # nothing of either push was stored
        store.series("demo", start=now - pd.Timedelta(minutes=5))
    ok = asyncio.run(push(past))
    assert ok.status_code == 200 and ok.json()["written"] == 2, ok.text
