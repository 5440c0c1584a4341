"""Shadow mode in the API and the dashboard (issue 30): two hours of the Azure 2024 trace on a
reactive-scaled simulated fleet with the workers' tick shadowing it in forecast-only mode
(``workers/shadow_replay.py``, real Redis), then a real uvicorn answers
``GET /v1/deployments/chat/shadow`` and a real headless Chromium draws the dashboard's panel
(screenshot in test-artifacts/shadow.png)."""
from __future__ import annotations

import json
import re

import httpx
import pandas as pd
import pytest

from browser import ROOT, chromium, run_chromium, serve_api
from warmcast.config.settings import load_settings
from warmcast.store import LoadStore
from warmup.sim import load_log
from workers.shadow_replay import run_shadow

DEPLOYMENTS = """deployments:
  - name: chat
    cold_start_min: 10
    min_replicas: 2
    max_replicas: 40
    scaler: {kind: dryrun}
    profiles:
      day: {capacity_rpm: 300}
"""
START, END = "2024-05-15 06:00", "2024-05-15 08:00"


@pytest.fixture
def shadowed(tmp_path, redis_client, redis_server_url, key_prefix, shared_data, monkeypatch):
    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS)
    data = load_log(shared_data / "azure2024_conversation_per_minute.csv")
    ts = pd.Timestamp(START)
    LoadStore(redis_client, key_prefix).upsert_frame("chat", data.frame()[data.frame().index < ts], now_ns=ts.value)
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state", models_dir=tmp_path / "models", dry_run=True)
    run = run_shadow(settings, "chat", data, ts, pd.Timestamp(END), "seasonal_naive", client=redis_client,
                     utilisation=1.0)
    monkeypatch.setenv("WARMCAST_DRY_RUN", "true")   # the API serves the loop's forecast-only settings
    for url in serve_api(settings, tmp_path, deployments_file=deps):
        yield url, run


def test_shadow_route_and_dashboard_panel(shadowed, tmp_path):
    url, run = shadowed
    r = httpx.get(f"{url}/v1/deployments/chat/shadow", params={"since": START, "until": END}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["actual"]["instance_hours"] == round(float(run.provisioned[:-1].sum()) / 60.0, 3)
    assert len(body["series"]["minute"]) == body["minutes"] == 119 and body["limits"]
    empty = httpx.get(f"{url}/v1/deployments/chat/shadow", params={"since": "2024-05-01", "until": "2024-05-02"},
                      timeout=60)
    assert empty.status_code == 409 and "no shadow records for deployment 'chat'" in empty.text

    chrome = chromium()
    page = f"{url}/?deployment=chat&refresh=60&shadow_since={START}&shadow_until={END}"
    dom = run_chromium(chrome, tmp_path, "--virtual-time-budget=20000", "--dump-dom", page)
    m = re.search(r'data-shadow="([^"]*)"', dom.stdout)
    assert m, f"shadow panel not rendered:\n{dom.stdout[-2000:]}\n{dom.stderr[-2000:]}"
    counts = json.loads(m.group(1).replace("&quot;", '"'))
    assert counts == {"arrivals": 119, "actual": 119, "warmcast": 119}
    assert f"instance-hours actual {body['actual']['instance_hours']:g}," in dom.stdout
    assert "Limits: The arrivals are those the actual fleet received" in dom.stdout
    shot = ROOT / "test-artifacts" / "shadow.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    run_chromium(chrome, tmp_path, "--virtual-time-budget=20000", "--window-size=1280,1400", f"--screenshot={shot}",
                 page)
    assert shot.is_file() and shot.stat().st_size > 10_000
