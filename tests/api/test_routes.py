"""Contract tests: every route, its status codes and its body shape, on real Redis."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from api.hot import HOT_TTL_S
from api_helpers import AUTH, END, stored_forecast, synthetic_frame
from warmcast.config.deployments import demo_deployment
from warmup.core.adapters import core_config, forecast_input
from warmup.core import plan_replicas


def test_list_deployments(client, seeded, store):
    store.upsert_frame("other", synthetic_frame(days=1))
    body = client.get("/v1/deployments").json()["deployments"]
    by = {d["name"]: d for d in body}
    assert by["demo"]["configured"] and by["demo"]["has_load"] and by["demo"]["profiles"]["day"] == 300
    assert by["other"]["configured"] is False and by["other"]["has_load"] is True


def test_stored_forecast_is_served_with_chosen_quantiles(client, seeded):
    r = client.get("/v1/deployments/demo/forecast", params={"horizon": 10, "quantiles": "0.5,0.7,0.9"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "stored" and body["model"] == "lstm" and body["trained_at"] == "2024-01-07 23:00:00"
    assert body["horizon"] == 10 and len(body["times"]) == 10 and body["times"][0] == "2024-01-08 00:00:00"
    fc = stored_forecast()
    assert body["quantiles"]["0.9"] == pytest.approx(list(fc.quantiles[0.9][:10]), abs=1e-3)
    # 0.7 lies between the stored 0.5 and 0.9: interpolated, ordered
    q5, q7, q9 = (np.array(body["quantiles"][k]) for k in ("0.5", "0.7", "0.9"))
    assert (q5 <= q7).all() and (q7 <= q9).all() and q7[0] == pytest.approx((q5[0] + q9[0]) / 2, abs=1e-3)


def test_forecast_computed_on_demand_when_none_stored(client, store):
    store.upsert_frame("demo", synthetic_frame(days=2))
    r = client.get("/v1/deployments/demo/forecast", params={"horizon": 30})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == "computed" and body["origin"] == END.strftime("%Y-%m-%d %H:%M:%S")
    # no trained model in this test's empty models dir: the note says so, and which model answers why
    assert "no trained model for 'demo'" in body["note"] and "shipped default model" in body["note"]
    p10, p50, p90 = (np.array(body["quantiles"][k]) for k in ("0.1", "0.5", "0.9"))
    assert np.isfinite(p50).all() and (p10 <= p50).all() and (p50 <= p90).all()
    # the synthetic daily cycle is at its ~100 rpm trough at midnight: the forecast is there, not zero
    assert 50 < p50.mean() < 250
    # asking for a level outside the stored/cached ones is computed too (fitted model reused)
    r2 = client.get("/v1/deployments/demo/forecast", params={"quantiles": "0.99", "horizon": 5})
    assert r2.status_code == 200 and len(r2.json()["quantiles"]["0.99"]) == 5


@pytest.mark.parametrize("params, field", [({"horizon": 31}, "horizon"), ({"horizon": 0}, "horizon"),
                                            ({"quantiles": "0.5,abc"}, "quantiles"), ({"quantiles": "1.5"}, "quantiles"),
                                            ({"horizon": "x"}, "horizon")])
def test_forecast_bad_parameters_name_the_field(client, seeded, params, field):
    r = client.get("/v1/deployments/demo/forecast", params=params)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][-1] == field


def test_unknown_deployment_is_404_everywhere(client, seeded):
    for path in ("forecast", "plan", "capacity", "audit", "dashboard"):
        r = client.get(f"/v1/deployments/nope/{path}")
        assert r.status_code == 404, (path, r.text)
    assert client.get("/v1/keda/nope").status_code == 404
    assert client.post("/v1/deployments/nope/pause", headers=AUTH).status_code == 404


def test_plan_computed_from_forecast_then_stored_plan_wins(client, seeded, state):
    body = client.get("/v1/deployments/demo/plan").json()
    # every planned minute sees its whole 15-min lead in the 30-min forecast
    assert body["source"] == "computed" and len(body["steps"]) == 30 - 15
    # P90 of the stored forecast peaks within the 15-min lead at 600*1.2*(1+0.5*15/29): replicas of
    # 200 rpm, the night profile's (00:00 lies in the demo's 22:00-07:00 night window)
    peak = max(stored_forecast().quantiles[0.9][:16])
    assert body["steps"][0]["desired"] == int(np.ceil(peak / 200)) and "P90" in body["steps"][0]["reason"]
    state.put("plan", "demo", {"desired": 7, "steps": [{"time": "2024-01-08 00:00:00", "desired": 7}],
                               "warmups": [], "switches": [{"to": "night"}]})
    body = client.get("/v1/deployments/demo/plan").json()
    assert body["source"] == "stored" and body["desired"] == 7 and body["switches"] == [{"to": "night"}]


def test_plan_at_night_uses_the_night_profile_and_is_the_cores_plan(client, seeded):
    dep = demo_deployment()
    core = plan_replicas(core_config(dep), forecast_input(stored_forecast(), (0.9,)), END.tz_localize("UTC"))
    body = client.get("/v1/deployments/demo/plan").json()
    assert [(s["time"], s["desired"], s["profile"]) for s in body["steps"]] == \
        [(c.time.strftime("%Y-%m-%d %H:%M:%S"), c.desired, c.profile) for c in core]
    assert {s["profile"] for s in body["steps"]} == {"night"} and core[0].capacity_rpm == 200
    assert [s["demand_rpm"] for s in body["steps"]] == pytest.approx([c.demand_rpm for c in core], abs=0.01)
    keda = client.get("/v1/keda/demo").json()  # the autoscalers read the same plan's present minute
    assert keda["capacityPerInstanceRpm"] == 200 and keda["profile"] == "night"
    assert keda["forecastReplicas"] == core[0].desired and keda["leadMinutes"] == 15


def test_capacity_plan_route(client, seeded):
    r = client.get("/v1/deployments/demo/capacity",
                   params={"span": "week", "quantile": 0.9, "utilisation": 0.5, "capacity_per_instance": 100})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["hours"]) == 168 and body["hours"][0]["start"] == "2024-01-08 00:00:00"
    assert body["total_gpu_hours"] == pytest.approx(sum(h["gpu_hours"] for h in body["hours"]))
    # the stored forecast (P90 up to 1080 rpm) covers the first hour and is above the profile there
    assert body["hours"][0]["source"] == "forecast" and body["hours"][0]["demand_rpm"] == pytest.approx(1080)
    peak_hour = max(body["hours"][1:], key=lambda h: h["demand_rpm"])
    assert peak_hour["source"] == "profile"
    assert 400 < peak_hour["demand_rpm"] < 700  # the synthetic daily peak is ~500 rpm
    assert peak_hour["replicas"] == int(np.ceil(peak_hour["demand_rpm"] / 50 - 1e-9))
    assert client.get("/v1/deployments/demo/capacity", params={"span": "month"}).status_code == 422
    assert client.get("/v1/deployments/demo/capacity", params={"start": "not a time"}).json()["detail"][0]["loc"] == \
        ["query", "start"]


def test_capacity_plan_at_a_level_the_forecast_lacks_reads_history_and_says_why(client, seeded):
    """The stored forecast holds P10-P90: a P99 plan was a 500 (found by the fuzz run); it now plans
    every hour from history, never extrapolating the forecast, and its notes say why."""
    r = client.get("/v1/deployments/demo/capacity", params={"quantile": 0.99, "capacity_per_instance": 100})
    assert r.status_code == 200, r.text
    body = r.json()
    assert all(h["source"] != "forecast" for h in body["hours"])
    assert any("quantile 0.99 is outside them" in n for n in body["notes"]), body["notes"]
    inside = client.get("/v1/deployments/demo/capacity", params={"quantile": 0.9, "capacity_per_instance": 100})
    assert inside.json()["hours"][0]["source"] == "forecast"


def test_capacity_plan_at_night_uses_the_night_profile(client, seeded):
    """Without a capacity asked for, each hour divides by the profile the demo's schedule makes
    active (night 22:00-07:00 UTC, 200 rpm; day 300 rpm), as the core's plan does."""
    from warmup.core.plan import stage_profile

    body = client.get("/v1/deployments/demo/capacity", params={"utilisation": 0.5}).json()
    by = {h["start"][11:13]: h for h in body["hours"]}
    cfg = core_config(demo_deployment())
    for hh, want in (("03", ("night", 200.0)), ("23", ("night", 200.0)), ("12", ("day", 300.0))):
        h = by[hh]
        at = pd.Timestamp(h["start"]).tz_localize("UTC").to_pydatetime()
        assert (h["profile"], h["capacity_rpm"]) == want == stage_profile(cfg, at)[:2]
        assert h["replicas"] == max(1, int(np.ceil(h["demand_rpm"] / (want[1] * 0.5) - 1e-9)))
    assert body["capacity_per_instance"] == 300 and any("profile night: 200 req/min declared" in n for n in body["notes"])


def test_audit_log_filters(client, seeded, state):
    state.audit("demo", "scale", "up 2->4", "forecast", applied=True, ts=pd.Timestamp("2024-01-07 10:00"))
    state.audit("demo", "warmup", "start low", "queue 6", applied=False, ts=pd.Timestamp("2024-01-07 11:00"))
    state.audit("demo", "scale", "hold", "no change", applied=False, ts=pd.Timestamp("2024-01-07 12:00"))
    all_ = client.get("/v1/deployments/demo/audit").json()["entries"]
    assert [e["ts"] for e in all_] == ["2024-01-07 12:00:00", "2024-01-07 11:00:00", "2024-01-07 10:00:00"]
    scale = client.get("/v1/deployments/demo/audit", params={"kind": "scale"}).json()["entries"]
    assert [e["decision"] for e in scale] == ["hold", "up 2->4"]
    since = client.get("/v1/deployments/demo/audit", params={"since": "2024-01-07 10:30"}).json()["entries"]
    assert len(since) == 2
    until = client.get("/v1/deployments/demo/audit", params={"until": "2024-01-07 10:30"}).json()["entries"]
    assert [e["decision"] for e in until] == ["up 2->4"]
    applied = client.get("/v1/deployments/demo/audit", params={"applied": True}).json()["entries"]
    assert [e["decision"] for e in applied] == ["up 2->4"]
    assert len(client.get("/v1/deployments/demo/audit", params={"limit": 1}).json()["entries"]) == 1
    bad = client.get("/v1/deployments/demo/audit", params={"since": "yesterday-ish"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "since"]


def test_push_observations_reach_the_load_store(client, seeded, store):
    obs = [{"time": "2024-01-08T00:00:00", "requests": 123, "input_tokens": 4000},
           {"time": "2024-01-08T00:01:00Z", "requests": 130}]
    r = client.post("/v1/deployments/demo/observations", json={"observations": obs}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["written"] == 2
    s = store.series("demo", start="2024-01-08 00:00")
    assert list(s.to_numpy()) == [123, 130]
    bad = client.post("/v1/deployments/demo/observations", headers=AUTH,
                      json={"observations": [{"time": "2024-01-08T00:02:30", "requests": 1}]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "time"
    neg = client.post("/v1/deployments/demo/observations", headers=AUTH,
                      json={"observations": [{"time": "2024-01-08T00:02:00", "requests": -1}]})
    assert neg.status_code == 422 and neg.json()["detail"][0]["loc"][-1] == "requests"
    dup = client.post("/v1/deployments/demo/observations", headers=AUTH,
                      json={"observations": [{"time": "2024-01-08T00:03:00", "requests": 1}] * 2})
    assert dup.status_code == 422 and "more than once" in dup.json()["detail"][0]["msg"]
    # found by the fuzz run: a year-1 time with a +18:24 offset overflowed datetime (a 500)
    ancient = client.post("/v1/deployments/demo/observations", headers=AUTH,
                          json={"observations": [{"time": "0001-01-01T01:46:00+18:24", "requests": 1}]})
    assert ancient.status_code == 422 and ancient.json()["detail"][0]["loc"][-1] == "time"


def test_finding1_observation_dated_2200_is_422_and_history_stays(client, seeded, store):
    """Issue 10 finding 1: one far-future minute pushed to the route used to delete the week."""
    before = store.frame("demo")
    r = client.post("/v1/deployments/demo/observations", headers=AUTH,
                    json={"observations": [{"time": "2200-01-01T00:00:00", "requests": 1}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "observations", "time"]
    assert "has not ended yet" in r.json()["detail"][0]["msg"]   # refused before the store sees it (issue 31)
    old = client.post("/v1/deployments/demo/observations", headers=AUTH,  # retention is 90 days
                      json={"observations": [{"time": "2023-06-01T00:00:00", "requests": 1}]})
    assert old.status_code == 422 and "retention" in old.json()["detail"][0]["msg"]
    pd.testing.assert_frame_equal(store.frame("demo"), before)


def test_profile_pause_resume_are_recorded(client, seeded, state):
    r = client.post("/v1/deployments/demo/profile", json={"profile": "night"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert state.take_profile_request("demo")["profile"] == "night"
    bad = client.post("/v1/deployments/demo/profile", json={"profile": "weekend"}, headers=AUTH)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "profile"]
    assert client.post("/v1/deployments/demo/pause", json={"reason": "maintenance"}, headers=AUTH).status_code == 200
    assert state.paused("demo")["reason"] == "maintenance"
    assert client.get("/v1/deployments").json()["deployments"][0]["paused"] is True
    assert client.post("/v1/deployments/demo/resume", headers=AUTH).status_code == 200
    assert state.paused("demo") is None
    kinds = [(e["decision"], e["applied"]) for e in client.get("/v1/deployments/demo/audit",
                                                              params={"kind": "manual"}).json()["entries"]]
    assert kinds == [("resume", True), ("pause", True), ("profile -> night", False)]


def test_keda_metrics_api_shape(client, seeded, state):
    body = client.get("/v1/keda/demo", params={"quantile": 0.9, "lead": 15}).json()
    peak = float(max(stored_forecast().quantiles[0.9][:16]))
    assert body["forecastDemandRpm"] == pytest.approx(peak, rel=1e-3)
    # 00:00 is in the demo's night window: replicas of the night profile's 200 rpm
    assert body["desiredReplicas"] == body["forecastReplicas"] == int(np.ceil(peak / 200))
    state.put("plan", "demo", {"desired": 9})
    # answers are reused for up to a second (api/hot.py): ask a different lead for a fresh one
    body = client.get("/v1/keda/demo", params={"lead": 10}).json()
    assert body["desiredReplicas"] == 9 and body["plannedReplicas"] == 9  # the planner's number wins


def test_prometheus_metrics(client, seeded, state):
    state.put("plan", "demo", {"desired": 4})
    text = client.get("/metrics").text
    fc = stored_forecast()
    line = f'warmcast_forecast_requests_per_minute{{deployment="demo",lead="15",level="0.9"}}'
    value = [l for l in text.splitlines() if l.startswith(line)]
    assert value and float(value[0].split()[-1]) == pytest.approx(fc.quantiles[0.9][14], rel=1e-4)
    assert 'warmcast_desired_replicas{deployment="demo"} 4.0' in text
    assert sum(1 for l in text.splitlines() if l.startswith("warmcast_forecast_requests_per_minute{")) == 90


def test_health_and_readiness(client, settings, seeded, state, redis_client, key_prefix):
    assert client.get("/healthz").json()["status"] == "ok"
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"]["redis"] == "ok"
    doc = state.get_forecast("demo")
    doc["created_at"] = "2020-01-01 00:00:00"  # stale
    state.put("forecast", "demo", doc)
    time.sleep(HOT_TTL_S)  # a probe's answer is reused for up to this long (api/hot.py)
    r = client.get("/readyz")
    assert r.status_code == 503 and "limit" in r.json()["checks"]["forecast:demo"]


def test_readiness_fails_when_redis_is_unreachable(tmp_path):
    from fastapi.testclient import TestClient

    from api.app import create_app
    from warmcast.config.settings import load_settings

    s = load_settings(redis_url="redis://127.0.0.1:1/0", state_dir=tmp_path)
    with TestClient(create_app(s)) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and "unreachable" in r.json()["checks"]["redis"]
        assert c.get("/v1/deployments").status_code == 503


def test_dashboard_data(client, seeded, state):
    state.record_fleet("demo", END - pd.Timedelta(minutes=5), 3, 2)
    state.audit("demo", "warmup", "start low", "queue depth 6 > 5", applied=True,
                ts=END - pd.Timedelta(minutes=3))
    state.audit("demo", "scale", "hold", "no change", applied=False, ts=END - pd.Timedelta(minutes=2))
    body = client.get("/v1/deployments/demo/dashboard", params={"minutes": 60}).json()
    assert len(body["load"]["times"]) == 60 and body["forecast"]["source"] == "stored"
    assert body["replicas"] == [{"time": "2024-01-07 23:55:00", "desired": 3, "actual": 2}]
    assert [e["category"] for e in body["events"]] == ["warmup"]  # "hold" is not a marker
    assert len(body["planned"]) == 30 - 15  # the minutes whose whole lead the forecast covers


def test_openapi_document_lists_every_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/v1/deployments", "/v1/deployments/{deployment}/forecast", "/v1/deployments/{deployment}/plan",
              "/v1/deployments/{deployment}/capacity", "/v1/deployments/{deployment}/whatif",
              "/v1/deployments/{deployment}/whatif/upload", "/v1/deployments/{deployment}/whatif/{job_id}",
              "/v1/deployments/{deployment}/audit", "/v1/deployments/{deployment}/observations",
              "/v1/deployments/{deployment}/profile", "/v1/deployments/{deployment}/pause",
              "/v1/deployments/{deployment}/resume", "/v1/keda/{deployment}", "/metrics", "/healthz", "/readyz"):
        assert p in paths, p
