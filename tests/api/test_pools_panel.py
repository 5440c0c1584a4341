"""The dashboard's node-pools card (issue 45) in a real headless Chromium against a real uvicorn:
each pool's warm GPUs and the fleet tick's reason, from ``GET /v1/fleet``; hidden without pools."""
from __future__ import annotations

import time

from api_helpers import stored_forecast, synthetic_frame
from browser import Page, chromium, serve_api

POOLED = """node_pools:
  - {name: a100, gpu: A100-80G, gpus_per_node: 8, node_lead_min: 10, max_nodes: 6}
deployments:
  - name: chat
    node_pool: a100
    scaler: {kind: dryrun}
    profiles: {day: {capacity_rpm: 300}}
"""
PLAIN = """deployments:
  - name: chat
    scaler: {kind: dryrun}
    profiles: {day: {capacity_rpm: 300}}
"""


def _open(settings, store, state, tmp_path, text: str) -> dict:
    chrome = chromium()
    fleet = tmp_path / "deployments.yaml"
    fleet.write_text(text)
    store.upsert_frame("chat", synthetic_frame(days=1))
    state.put_forecast("chat", stored_forecast(level=100.0), trained_at="2024-01-07 23:00:00")
    for url in serve_api(settings, tmp_path, deployments_file=fleet):
        with Page(chrome, tmp_path, url + "/") as page:
            page.wait_for("document.body.dataset.pools")
            return {"pools": page.eval("document.body.dataset.pools"),
                    "hidden": page.eval("document.getElementById('pools-card').hidden"),
                    "text": page.eval("document.getElementById('pools').innerText")}
    raise AssertionError("the API did not start")


def test_the_pools_card_shows_each_pools_warm_gpus_and_reason(settings, store, state, tmp_path):
    state.put("node-pool", "a100", {"pool": "a100", "gpu": "A100-80G", "warm_gpus": 5, "nodes_wanted": 2,
                                    "reason": "P95 of the pooled demand of 1 deployment(s) peaks at 9.2 GPUs",
                                    "members": {"chat": 9.2}, "applied": False, "outcome": "forecast-only mode",
                                    "decided_at": time.time()})
    seen = _open(settings, store, state, tmp_path, POOLED)
    assert seen["pools"] == '[["a100",5]]' and seen["hidden"] is False
    assert "P95 of the pooled demand" in seen["text"] and "2 of 6 nodes" in seen["text"]


def test_the_pools_card_is_hidden_without_node_pools(settings, store, state, tmp_path):
    seen = _open(settings, store, state, tmp_path, PLAIN)
    assert seen["pools"] == "[]" and seen["hidden"] is True
