"""Contract tests of GET /v1/deployments/{deployment}/capacity/gpu-plan (real Redis, the example deployments)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from api_helpers import END, stored_forecast, synthetic_frame

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployments.yaml"
URL = "/v1/deployments/{}/capacity/gpu-plan"


@pytest.fixture
def client(example_client):
    return example_client


@pytest.fixture
def pools_seeded(store, state):
    idx = pd.date_range(END - pd.Timedelta(days=2), END - pd.Timedelta(minutes=1), freq="min", name="time")
    store.upsert_frame("chat-pools.hot", pd.DataFrame({"requests": np.full(len(idx), 30.0)}, index=idx))
    store.upsert_frame("chat-pools", synthetic_frame(days=2))
    state.put_forecast("chat-pools", stored_forecast(), trained_at="2024-01-07 23:00:00")


def test_route_and_schema_are_in_the_openapi_document(client):
    doc = client.get("/openapi.json").json()
    op = doc["paths"]["/v1/deployments/{deployment}/capacity/gpu-plan"]["get"]
    assert {p["name"] for p in op["parameters"]} >= {"deployment", "horizon", "pool", "quantile", "growth", "types"}
    assert set(op["responses"]) >= {"200", "401", "404", "422"}
    fields = doc["components"]["schemas"]["GpuPlanOut"]["properties"]
    assert {"slots", "total_cost", "all_a100_cost", "saving_vs_all_a100", "excluded", "what_if"} <= set(fields)


def test_day_plan_for_the_hot_pool_matches_the_hand_computed_mix(client, pools_seeded):
    r = client.get(URL.format("chat-pools"), params={"pool": "hot", "types": "A100-80G,A10G"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["slots"]) == 24 and body["slots"][0]["start"] == "2024-01-08 00:00"
    # 30 rpm at 60%: 3 L4 + 1 A10G (1.19) per hour; all-A100 needs 2 (2.00)
    assert {tuple(sorted(s["instances"].items())) for s in body["slots"]} == {(("A100-80G", 0), ("A10G", 1), ("L4", 3))}
    assert body["total_cost"] == pytest.approx(24 * 1.19) and body["all_a100_cost"] == pytest.approx(48)
    # what-if without L4: 1 A100 + 1 A10G = 33 rpm (1.35) beats 4 A10G = 36 rpm (1.40) and 2 A100 (2.00)
    w = body["what_if"]
    assert w["changes"] == {"types": ["A100-80G", "A10G"]}
    assert w["slots"][0]["instances"] == {"A100-80G": 1, "A10G": 1} and w["total_cost"] == pytest.approx(24 * 1.35)


def test_thirty_minutes_ahead_from_the_stored_forecast(client, pools_seeded, state):
    # P90 peak 180 rpm: within chat-pools' max_replicas 16 (the 1,080 rpm of the fixture's forecast is not)
    state.put_forecast("chat-pools", stored_forecast(level=100), trained_at="2024-01-07 23:00:00")
    body = client.get(URL.format("chat-pools"), params={"horizon": "30m"}).json()
    fc = stored_forecast(level=100)
    peak = float(fc.quantile(0.9)[:30].max())
    assert len(body["slots"]) == 1 and body["slots"][0]["demand_rpm"] == pytest.approx(peak, rel=1e-3)
    s = body["slots"][0]
    cost = {o["type"]: o["cost_index"] for o in body["options"]}
    assert s["capacity_rpm"] >= peak and body["utilisation"] == 0.8
    assert s["cost"] == pytest.approx(0.5 * sum(n * cost[t] for t, n in s["instances"].items()))  # half an hour
    assert body["saving_vs_all_a100"] > 0 and "stored forecast" in body["method"]


def test_thirty_minutes_ahead_stays_within_max_replicas_and_says_so(client, pools_seeded):
    """Issue 32: the plan ignored max_replicas (73 instances for a max of 40)."""
    s = client.get(URL.format("chat-pools"), params={"horizon": "30m"}).json()["slots"][0]
    assert sum(s["instances"].values()) <= 16 and s["capacity_rpm"] < 1080
    assert "SLO NOT MET" in s["reason"] and "max_replicas (16)" in s["reason"]


@pytest.mark.parametrize("dep, params, code, text", [
    ("ghost", {}, 404, "ghost"),
    ("chat-pools", {"pool": "cold"}, 404, "chat-pools.cold"),
    ("chat-pools", {"horizon": "7d"}, 422, "horizon"),
    ("chat-pools", {"pool": "warm"}, 422, "pool"),
    ("chat-pools", {"types": "H100"}, 422, "H100"),
    ("chat-pools", {"growth": "-1"}, 422, "growth"),
])
def test_bad_requests_name_what_to_fix(client, pools_seeded, dep, params, code, text):
    r = client.get(URL.format(dep), params=params)
    assert r.status_code == code and text in r.text, r.text


def test_a_deployment_without_gpu_section_says_what_to_add(client, store):
    store.upsert_frame("chat-llama", synthetic_frame(days=1))
    r = client.get(URL.format("chat-llama"))
    assert r.status_code == 422 and "no 'gpu:' section" in r.text
    assert r.json()["detail"][0]["loc"] == ["path", "deployment"]  # what the path's deployment lacks


@pytest.mark.parametrize("dep, params, loc", [
    ("chat-pools", {"types": "H100"}, ["query", "types"]),          # the planner refuses it
    ("chat-llama", {"pool": "hot"}, ["query", "pool"]),             # a pool chat-llama does not declare
    ("chat-pools", {"growth": "-1"}, ["query", "growth"]),          # FastAPI's own check
])
def test_a_bad_query_parameter_is_located_in_the_query(client, pools_seeded, store, dep, params, loc):
    # issue 32: the planner's refusals were located at ["body"], and a GET has no body
    store.upsert_frame("chat-llama", synthetic_frame(days=1))
    r = client.get(URL.format(dep), params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, r.text


def test_reads_need_the_read_token_when_configured(settings, pools_seeded):
    from api.app import create_app

    s = settings.model_copy(update={"deployments_file": EXAMPLE, "api_read_token": "reader"})
    with TestClient(create_app(s)) as c:
        assert c.get(URL.format("chat-pools")).status_code == 401
        assert c.get(URL.format("chat-pools"), headers={"Authorization": "Bearer reader"}).status_code == 200


def test_thirty_minutes_ahead_without_a_stored_forecast_is_located_at_horizon(client, store):
    """Issue 41 finding 4c: horizon=30m plans from the stored forecast; without one the 422 was
    located at ["path", "deployment"] (and said '--horizon', a CLI flag), though the query parameter
    asked for what is missing and horizon=24h plans from the stored load alone."""
    store.upsert_frame("chat-pools", synthetic_frame(days=2))
    r = client.get(URL.format("chat-pools"), params={"horizon": "30m"})
    assert r.status_code == 422, r.text
    (err,) = r.json()["detail"]
    assert err["loc"] == ["query", "horizon"] and "24h" in err["msg"] and "--" not in err["msg"], err
    assert client.get(URL.format("chat-pools"), params={"horizon": "24h"}).status_code == 200
