"""POST /v1/alerts (the Alertmanager webhook) and GET /v1/deployments/{d}/alerts: write token
required, Alertmanager's payload reduced to one note per deployment, recorded in Redis and
queued for the workers' alert step; bad payloads refused naming the field, nothing recorded."""
from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pandas as pd

from api_helpers import AUTH

FIRING = {
    "version": "4", "groupKey": '{}:{deployment="demo"}', "status": "firing", "receiver": "warmcast",
    "groupLabels": {"deployment": "demo"}, "commonLabels": {}, "externalURL": "http://am",
    "alerts": [
        {"status": "firing", "labels": {"alertname": "WarmcastTTFTHigh", "deployment": "demo", "tier": "primary",
                                        "adjust": "up"},
         "annotations": {"summary": "TTFT P99 above 500 ms"}, "startsAt": "2026-01-05T12:00:00.123+01:00",
         "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "a1"},
        {"status": "firing", "labels": {"alertname": "WarmcastLateShare", "deployment": "demo", "tier": "medium"},
         "startsAt": "2026-01-05T11:02:00Z", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "b2"},
        {"status": "resolved", "labels": {"alertname": "WarmcastKVCacheFull", "deployment": "demo",
                                          "tier": "severe"},
         "startsAt": "2026-01-05T10:00:00Z", "endsAt": "2026-01-05T10:30:00Z", "fingerprint": "c3"},
    ]}


def _queued(redis_client, key_prefix) -> list[dict]:
    msgs = [json.loads(m) for m in redis_client.lrange(f"{key_prefix}:celery:warmcast", 0, -1)]
    return [json.loads(base64.b64decode(m["body"]))[1] for m in msgs if m["headers"]["task"] == "warmcast.alert"]


def test_needs_the_write_token(client, redis_client, key_prefix):
    assert client.post("/v1/alerts", json=FIRING).status_code == 401
    assert client.post("/v1/alerts", json=FIRING, headers={"Authorization": "Bearer nope"}).status_code == 403
    assert _queued(redis_client, key_prefix) == []


def test_firing_group_recorded_and_queued_with_its_highest_firing_tier(client, redis_client, key_prefix):
    before = datetime.now(timezone.utc).replace(tzinfo=None)
    r = client.post("/v1/alerts", json=FIRING, headers=AUTH)
    assert r.status_code == 202, r.text
    [acc] = r.json()["accepted"]
    assert acc["deployment"] == "demo" and acc["tier"] == "medium" and acc["status"] == "firing"
    assert acc["alertnames"] == ["WarmcastLateShare", "WarmcastTTFTHigh"]  # the resolved one is not counted
    [queued] = _queued(redis_client, key_prefix)
    note = queued["note"]
    assert queued["deployment"] == "demo" and note["group_key"] == FIRING["groupKey"]
    assert note["starts_at"] == "2026-01-05T11:00:00.123000"  # earliest, in naive UTC
    assert note["ends_at"] is None and note["adjust"] == "up"
    # every alert's fingerprint and status, in one order: what tells a re-delivery from news
    assert note["alerts"] == [["a1", "firing"], ["b2", "firing"], ["c3", "resolved"]]
    # receipt time, not the worker's: the late-copy window must not stretch while workers are down
    assert before <= datetime.fromisoformat(note["received_at"]) <= datetime.now(timezone.utc).replace(tzinfo=None)
    [(sid, fields)] = redis_client.xrange(f"{key_prefix}:alert-notes:demo")
    assert json.loads(fields[b"note"]) == note and sid.decode() == acc["note_id"]


def test_resolved_group_carries_its_end(client, redis_client, key_prefix):
    body = {**FIRING, "status": "resolved", "alerts": [{**a, "status": "resolved", "endsAt": "2026-01-05T12:30:00Z"}
                                                       for a in FIRING["alerts"]]}
    [acc] = client.post("/v1/alerts", json=body, headers=AUTH).json()["accepted"]
    assert acc["status"] == "resolved" and acc["tier"] == "severe"
    assert _queued(redis_client, key_prefix)[0]["note"]["ends_at"] == "2026-01-05T12:30:00"


def test_bad_payloads_are_refused_naming_the_problem_and_nothing_is_recorded(client, redis_client, key_prefix):
    no_dep = {**FIRING, "alerts": [{**FIRING["alerts"][0], "labels": {"alertname": "X"}}]}
    r = client.post("/v1/alerts", json=no_dep, headers=AUTH)
    assert r.status_code == 422 and "deployment label" in r.text
    bad_tier = {**FIRING, "alerts": [{**FIRING["alerts"][0], "labels": {"deployment": "demo", "tier": "critical"}}]}
    r = client.post("/v1/alerts", json=bad_tier, headers=AUTH)
    assert r.status_code == 422 and "tier label 'critical'" in r.text
    unknown = {**FIRING, "alerts": [{**FIRING["alerts"][0], "labels": {"deployment": "nope", "tier": "primary"}}]}
    r = client.post("/v1/alerts", json=unknown, headers=AUTH)
    assert r.status_code == 404 and "'nope' is not configured" in r.text
    r = client.post("/v1/alerts", json={**FIRING, "alerts": []}, headers=AUTH)
    assert r.status_code == 422
    assert _queued(redis_client, key_prefix) == [] and not redis_client.exists(f"{key_prefix}:alert-notes:demo")


def test_alert_history_route_reads_episodes_and_reports(client, redis_client, key_prefix):
    from datetime import datetime

    from warmup.core.alerts import Episode, Tier
    from workers.alerting import state as alert_state
    t = datetime(2026, 1, 5, 12)
    alert_state.store_episode(redis_client, key_prefix, Episode("g", "demo", t, t, Tier.PRIMARY, t,
                                                                ("primary:report",), ("WarmcastTTFTHigh",)))
    alert_state.keep_report(redis_client, key_prefix, "demo", {"tier": "primary", "text": "[PRIMARY] demo"})
    r = client.get("/v1/deployments/demo/alerts")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["episodes"][0]["done"] == ["primary:report"] and body["reports"][0]["text"] == "[PRIMARY] demo"
    assert body["failover"] is None


def test_dashboard_shows_the_alert_timeline_beside_load_and_replicas(client, seeded, state):
    state.audit("demo", "alert", "firing primary: report, adjust", "alert_opened: WarmcastTTFTHigh firing", True,
                ts=pd.Timestamp("2024-01-07 22:00:00"))
    state.audit("demo", "alert", "firing primary: nothing", "alert_duplicate: handled", False,
                ts=pd.Timestamp("2024-01-07 22:01:00"))
    state.audit("demo", "alert-response", "medium standby", "alert_escalated: ...", True,
                ts=pd.Timestamp("2024-01-07 22:10:00"))
    state.audit("demo", "alert", "resolved medium: episode closed", "alert_resolved: after 12 min", False,
                ts=pd.Timestamp("2024-01-07 22:12:00"))
    body = client.get("/v1/deployments/demo/dashboard", params={"minutes": 240}).json()
    got = [(e["category"], e["decision"]) for e in body["events"] if e["category"] == "alert"]
    assert got == [("alert", "firing primary: report, adjust"), ("alert", "medium standby"),
                   ("alert", "resolved medium: episode closed")]


def test_round2_an_alert_without_a_tier_label_or_starting_before_1971_is_refused(client, redis_client, key_prefix):
    """Issue 31: a forged alert with a valid token but no tier label ran the primary tier; a startsAt
    before 1971 crashed the report.  Both are 422 naming the field, and nothing is recorded or queued."""
    no_tier = json.loads(json.dumps(FIRING))
    del no_tier["alerts"][0]["labels"]["tier"]
    r = client.post("/v1/alerts", json=no_tier, headers=AUTH)
    assert r.status_code == 422 and "needs a tier label" in r.text, r.text
    old = json.loads(json.dumps(FIRING))
    old["alerts"][1]["startsAt"] = "1960-01-01T00:00:00Z"
    r = client.post("/v1/alerts", json=old, headers=AUTH)
    assert r.status_code == 422 and "before 1971" in r.text, r.text
    assert _queued(redis_client, key_prefix) == []
    assert client.post("/v1/alerts", json=FIRING, headers=AUTH).status_code == 202   # the real one still goes
