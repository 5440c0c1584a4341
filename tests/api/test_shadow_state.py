"""Issue 46 item 9: a shadow report the stored state cannot give (no records in the window, not in
forecast-only mode) is a 409 with the reason, not a 422 validation error: the request was well formed."""
from __future__ import annotations


def test_no_shadow_records_is_a_conflict_with_the_state_not_a_bad_request(example_client):
    r = example_client.get("/v1/deployments/chat-llama/shadow", params={"since": "2024-05-01", "until": "2024-05-02"})
    assert r.status_code == 409, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert "not in forecast-only mode" in detail and "WARMCAST_DRY_RUN=true" in detail


def test_a_bad_window_stays_a_422_at_its_parameter(example_client):
    r = example_client.get("/v1/deployments/chat-llama/shadow", params={"since": "soon"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "since"]


def test_the_409_is_in_the_openapi_document(example_client):
    op = example_client.get("/openapi.json").json()["paths"]["/v1/deployments/{deployment}/shadow"]["get"]
    assert "409" in op["responses"]
