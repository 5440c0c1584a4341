"""Issue 46 item 3 (the issue's item 5): one staleness rule for every serving route.

For a deployment whose workers never ran, KEDA's HTTP route answered 503 "forecast 2826 s old" while
the gRPC scaler answered 3 replicas: each process kept the forecast it had computed with the time
of its first computation, and one process had computed it long before.  Ten minutes after the
workers stopped, /v1/deployments/D/plan and /forecast answered 200 with no age and no stale flag.
The dashboard's axis showed times without a date, so a 2014 log looked live."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from api_helpers import stored_forecast, synthetic_frame
from test_keda_grpc import _call, generated  # noqa: F401 - the fixture, from KEDA's own proto

ROOT = Path(__file__).resolve().parents[2]
TS = "%Y-%m-%d %H:%M:%S"
LIMIT_S = 3  # WARMCAST_API_PLAN_MAX_AGE_S for these tests: seconds, not five minutes


def ago(seconds: float) -> str:
    return (pd.Timestamp.now(tz="UTC").tz_localize(None) - pd.Timedelta(seconds=seconds)).strftime(TS)


@pytest.fixture
def config():
    from api.deps import ApiConfig

    return replace(ApiConfig.from_env(), plan_max_age_s=LIMIT_S, cache_ttl_s=1.0)


def test_a_computed_forecast_is_as_fresh_for_every_route(generated, settings, store, config):  # noqa: F811
    """Workers never ran: the API computes the forecast.  One process computed it LIMIT_S ago, another
    just now; the data has not changed, so both have the same forecast, and both serve it."""
    from api.app import create_app
    from api.deps import build_context
    from api.keda.scaler import serve

    store.upsert_frame("demo", synthetic_frame(days=1).iloc[-300:])
    with TestClient(create_app(settings, config)) as c:
        assert c.get("/v1/keda/demo", params={"lead": 3}).status_code == 200
        time.sleep(LIMIT_S + 0.5)  # the HTTP process's computation is now older than the limit
        http = c.get("/v1/keda/demo", params={"lead": 4})
        fc = c.get("/v1/deployments/demo/forecast").json()
        handle = serve(build_context(settings, config), "127.0.0.1:0")  # another process: computes now
        try:
            grpc = _call(generated, handle.port, [{"rpc": "GetMetrics", "name": "demo", "meta": {"lead": "4"}}])
        finally:
            handle.stop(grace=1)
    assert http.status_code == 200, http.text
    assert grpc[0].get("value") == float(http.json()["desiredReplicas"]), grpc
    assert fc["source"] == "computed" and fc["stale"] is False and 0 <= fc["age_s"] <= LIMIT_S


def stop_the_loop(state, age_s: float) -> None:
    """What a loop that stopped ``age_s`` ago left behind: its last plan and forecast."""
    state.put("plan", "demo", {"created_at": ago(age_s), "desired": 5})
    state.put_forecast("demo", stored_forecast(), now=pd.Timestamp(ago(age_s)))


def test_every_route_says_the_age_and_refuses_or_flags_past_the_limit(generated, settings, seeded, state,  # noqa: F811
                                                                     config):
    from api.app import create_app
    from api.deps import build_context
    from api.keda.scaler import serve

    stop_the_loop(state, 1)
    with TestClient(create_app(settings, config)) as c:
        fresh = {p: c.get(f"/v1/deployments/demo/{p}").json() for p in ("plan", "forecast")}
        stop_the_loop(state, 600)
        # the forecast route answers its copy of the stored document while re-reading it (up to
        # api/service.RAW_STALE_S): ask until the new one is read
        deadline = time.monotonic() + 20
        while c.get("/v1/deployments/demo/forecast").json()["age_s"] < 590 and time.monotonic() < deadline:
            time.sleep(0.5)
        stale = {p: c.get(f"/v1/deployments/demo/{p}") for p in ("plan", "forecast")}
        keda = c.get("/v1/keda/demo", params={"lead": 7})
        dash = c.get("/v1/deployments/demo/dashboard").json()
    handle = serve(build_context(settings, config), "127.0.0.1:0")
    try:
        grpc = _call(generated, handle.port, [{"rpc": "GetMetrics", "name": "demo"}, {"rpc": "IsActive", "name": "demo"}])
    finally:
        handle.stop(grace=1)
    for p in ("plan", "forecast"):
        assert fresh[p]["stale"] is False and 0 <= fresh[p]["age_s"] <= LIMIT_S, fresh[p]
        assert stale[p].status_code == 200 and stale[p].json()["stale"] is True, stale[p].text
        assert 590 <= stale[p].json()["age_s"] <= 700
    assert keda.status_code == 503 and keda.json()["stale"] is True
    assert [g.get("code") for g in grpc] == ["UNAVAILABLE", "UNAVAILABLE"], grpc
    assert dash["forecast"]["stale"] is True and dash["forecast"]["age_s"] >= 590


def test_the_dashboard_axis_shows_the_date_with_the_time():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the dashboard's chart code is checked with it)")
    script = (f"global.window = {{}}; global.document = {{}}; require({json.dumps(str(ROOT / 'api/static/chart.js'))});"
              "const f = window.WarmcastChart.fmtTime;"
              "console.log(JSON.stringify([f(Date.parse('2014-07-03T12:30:00Z')), f(Date.parse('2026-01-05T00:00:00Z'))]));")
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    labels = json.loads(out.stdout)
    assert "2014-07-03" in labels[0] and "12:30" in labels[0]
    assert "2026-01-05" in labels[1] and "00:00" in labels[1]
