"""Issue 32 item 3: a stopped loop's last plan is not served forever.

Past ``WARMCAST_API_PLAN_MAX_AGE_S`` (default 300 s, five ticks) the KEDA HTTP route answers 503
with a JSON reason (KEDA's metrics-api scaler counts a failure and applies its fallback), the gRPC
external scaler answers UNAVAILABLE (same), and /metrics drops the plan and forecast gauges and
exports the age and a stale flag instead; a deployment no longer configured has no plan gauges."""
from __future__ import annotations

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from api_helpers import stored_forecast, synthetic_frame
from test_keda_grpc import _call, generated  # noqa: F401 - the fixture, from KEDA's own proto

TS = "%Y-%m-%d %H:%M:%S"


def ago(seconds: float) -> str:
    return (pd.Timestamp.now(tz="UTC").tz_localize(None) - pd.Timedelta(seconds=seconds)).strftime(TS)


def stop_the_loop(state, plan_age_s: float, forecast_age_s: float) -> None:
    """What a loop that stopped that long ago left behind: its last plan and forecast."""
    state.put("plan", "demo", {"created_at": ago(plan_age_s), "desired": 5})
    state.put_forecast("demo", stored_forecast(), now=pd.Timestamp(ago(forecast_age_s)))


def test_keda_http_answers_503_with_the_reason_once_the_plan_is_stale(client, seeded, state):
    stop_the_loop(state, 30, 30)
    assert client.get("/v1/keda/demo", params={"lead": 3}).json()["desiredReplicas"] == 5
    stop_the_loop(state, 900, 30)
    r = client.get("/v1/keda/demo", params={"lead": 4})
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["stale"] is True and body["what"] == "plan" and body["maxAgeSeconds"] == 300
    assert 890 <= body["ageSeconds"] <= 960 and "WARMCAST_API_PLAN_MAX_AGE_S" in body["detail"]
    assert state.get("plan", "demo")["desired"] == 5  # nothing stored is lost: it is only not served
    stop_the_loop(state, 30, 900)  # a fresh plan on a forecast the workers stopped renewing
    r = client.get("/v1/keda/demo", params={"lead": 5})
    assert r.status_code == 503 and r.json()["what"] == "forecast"


def test_the_limit_is_a_setting(settings, seeded, state, monkeypatch):
    from api.app import create_app

    stop_the_loop(state, 900, 900)
    monkeypatch.setenv("WARMCAST_API_PLAN_MAX_AGE_S", "3600")
    with TestClient(create_app(settings)) as c:
        assert c.get("/v1/keda/demo").json()["desiredReplicas"] == 5
    monkeypatch.setenv("WARMCAST_API_PLAN_MAX_AGE_S", "60")
    stop_the_loop(state, 120, 10)
    with TestClient(create_app(settings)) as c:
        assert c.get("/v1/keda/demo").json()["maxAgeSeconds"] == 60


def test_grpc_scaler_answers_unavailable_for_a_stale_plan(generated, settings, seeded, state):  # noqa: F811
    from api.deps import build_context
    from api.keda.scaler import serve

    handle = serve(build_context(settings), "127.0.0.1:0")
    try:
        stop_the_loop(state, 30, 30)
        fresh = _call(generated, handle.port, [{"rpc": "GetMetrics", "name": "demo"}])
        stop_the_loop(state, 900, 900)
        stale = _call(generated, handle.port, [
            {"rpc": "GetMetrics", "name": "demo"}, {"rpc": "IsActive", "name": "demo"},
            {"rpc": "GetMetricSpec", "name": "demo", "meta": {"metric": "forecastDemandRpm"}}])
    finally:
        handle.stop(grace=1)
    assert fresh[0]["value"] == 5.0
    assert stale[0]["code"] == "UNAVAILABLE" and "plan is 9" in stale[0]["detail"], stale
    assert "WARMCAST_API_PLAN_MAX_AGE_S" in stale[0]["detail"] and stale[1]["code"] == "UNAVAILABLE"
    assert stale[2]["target"] > 0  # the target is the configuration's capacity: it does not go stale


def _gauges(text: str, name: str) -> dict[str, float]:
    return {line.split("}")[0] + "}": float(line.split()[-1]) for line in text.splitlines()
            if line.startswith(name + "{")}


def fresh_exposition(client, wanted: str) -> str:
    """/metrics once its render has caught up (a body is reused for a second, and an older one is answered
    while a new one renders: api/hot.py)."""
    import time

    deadline = time.monotonic() + 15
    while True:
        text = client.get("/metrics").text
        if wanted in text or time.monotonic() > deadline:
            return text
        time.sleep(0.3)


def test_metrics_drop_a_stale_plan_and_export_its_age(client, seeded, state, store):
    stop_the_loop(state, 30, 30)
    text = client.get("/metrics").text
    assert _gauges(text, "warmcast_desired_replicas") == {'warmcast_desired_replicas{deployment="demo"}': 5.0}
    assert _gauges(text, "warmcast_plan_stale")['warmcast_plan_stale{deployment="demo"}'] == 0.0
    stop_the_loop(state, 900, 900)
    text = fresh_exposition(client, 'warmcast_plan_stale{deployment="demo"} 1.0')
    assert 'deployment="demo"' not in "".join(
        l for l in text.splitlines() if l.startswith(("warmcast_desired_replicas{", "warmcast_forecast_requests_per")))
    assert _gauges(text, "warmcast_plan_stale")['warmcast_plan_stale{deployment="demo"}'] == 1.0
    assert 890 <= _gauges(text, "warmcast_plan_age_seconds")['warmcast_plan_age_seconds{deployment="demo"}'] <= 960


def test_a_deployment_no_longer_configured_has_no_plan_gauges(client, seeded, state, store):
    store.upsert_frame("retired", synthetic_frame())   # its history stays readable
    state.put("plan", "retired", {"created_at": ago(10), "desired": 7})
    text = client.get("/metrics").text
    assert 'deployment="retired"' not in "".join(
        l for l in text.splitlines() if l.startswith(("warmcast_desired_replicas{", "warmcast_plan_")))
    assert client.get("/v1/keda/retired").status_code == 404
