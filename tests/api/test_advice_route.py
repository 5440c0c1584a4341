"""Contract tests of GET /v1/deployments/{deployment}/advice/profiles (real Redis, the example deployments)."""
from __future__ import annotations


import pandas as pd
import pytest
import yaml

from warmcast.config.deployments import parse_deployments
from warmcast.generate import generate_minute_frame

URL = "/v1/deployments/{}/advice/profiles"


@pytest.fixture
def client(example_client):
    return example_client


def test_route_and_schema_are_in_the_openapi_document(client):
    doc = client.get("/openapi.json").json()
    op = doc["paths"]["/v1/deployments/{deployment}/advice/profiles"]["get"]
    assert {p["name"] for p in op["parameters"]} >= {"deployment", "memory_gb", "weights_gb", "kv_bytes_per_token"}
    assert set(op["responses"]) >= {"200", "401", "404", "422"}
    fields = doc["components"]["schemas"]["ProfileAdviceOut"]["properties"]
    assert {"windows", "default_profile", "prewarm", "cold_start_min", "reasons", "fragment"} <= set(fields)


def test_advice_for_a_configured_deployment_with_a_smooth_day_night_mix(client, store):
    # the generator's default mix: ~70% long tickets in the small hours, ~10% mid-afternoon
    store.upsert_frame("chat-llama", generate_minute_frame(days=3, mean_rpm=30, seed=2).drop(columns=["coverage"],
                                                                                            errors="ignore"))
    r = client.get(URL.format("chat-llama"), params={"memory_gb": 80, "weights_gb": 16})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["timezone"] == "Europe/Berlin" and [w["profile"] for w in body["windows"]] == ["day", "night"]
    day, night = body["windows"]
    assert day["ctx_mean"] < night["ctx_mean"] and day["engine_args"]["max-num-seqs"] > night["engine_args"]["max-num-seqs"]
    assert {w["engine_args"]["block-size"] for w in body["windows"]} <= {16, 32, 64}
    assert [p["profile"] for p in body["prewarm"]] == ["night", "day"] and body["cold_start_min"] == 15
    dep = parse_deployments(yaml.safe_load(body["fragment"])).get("chat-llama")
    assert dep.schedule.windows[0].profile == "night"


def test_no_token_counts_is_a_422_naming_it(client, store):
    idx = pd.date_range("2024-01-01", periods=120, freq="min", name="time")
    store.upsert_frame("chat-llama", pd.DataFrame({"requests": 5.0}, index=idx))
    r = client.get(URL.format("chat-llama"))
    assert r.status_code == 422 and "no prompt-token counts" in r.text
    # what the path's deployment lacks; a GET has no body to locate it in (issue 32: ["body"])
    assert r.json()["detail"][0]["loc"] == ["path", "deployment"]


def test_a_bad_query_parameter_is_located_in_the_query(client):
    r = client.get(URL.format("chat-llama"), params={"memory_gb": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "memory_gb"], r.text


def test_unknown_deployment_is_404(client):
    assert client.get(URL.format("nope")).status_code == 404


def test_weights_that_fill_the_memory_are_a_422_at_weights_gb(client, store):
    store.upsert_frame("chat-llama", generate_minute_frame(days=1, mean_rpm=30, seed=2).drop(columns=["coverage"],
                                                                                            errors="ignore"))
    r = client.get(URL.format("chat-llama"), params={"memory_gb": 24, "weights_gb": 40})
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"] == ["query", "weights_gb"] and "no room for the KV cache in 24 GB" in d["msg"]
    assert client.get(URL.format("chat-llama"), params={"memory_gb": 80, "weights_gb": 40}).status_code == 200
