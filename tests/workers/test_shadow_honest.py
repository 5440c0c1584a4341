"""Issue 46 item 8: shadow mode as the README tells it.

- After ``WARMCAST_DRY_RUN=true warmcast run --simulate`` the records live under the simulated run's key
  prefix (``<prefix>:sim``): ``report shadow -d D`` with the same settings finds them, and says so.
- A negative saving is said as what it is ("warmcast would have used ... more"), never "saved -0.067".
- The actual fleet's capacity is the live profile's, as each tick read it (night at night), not the
  default profile's.

Shadow records are written into real Redis as the tick writes them (``workers.shadow.key``)."""
from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pandas as pd
import pytest

from warmcast.config.settings import load_settings
from warmcast.store import LoadStore
from workers import shadow
from workers.shadow_report import build, summary

DEPLOYMENTS = """deployments:
  - name: chat
    cold_start_min: 10
    min_replicas: 1
    max_replicas: 40
    default_profile: day
    profiles:
      day: {capacity_rpm: 300}
      night: {capacity_rpm: 150}
"""
START = pd.Timestamp("2024-05-15 00:00")
MINUTES = 90


def _seed(redis_client, prefix: str, ready: int, cap: float) -> None:
    """Two days of history at 600 req/min, then one shadow record a minute: the fleet held ``ready``
    instances and the tick planned with ``cap`` req/min per instance (the live profile's)."""
    hist = pd.date_range(START - pd.Timedelta(days=2), START - pd.Timedelta(minutes=1), freq="min", name="time")
    LoadStore(redis_client, prefix).upsert_frame("chat", pd.DataFrame({"requests": np.full(len(hist), 600.0)},
                                                                      index=hist), now_ns=START.value)
    for m in range(MINUTES + 1):
        t = START + pd.Timedelta(minutes=m)
        rec = {"minute": t.strftime("%Y-%m-%d %H:%M"), "audit_id": f"{m}-0", "arrivals": 600.0, "ready": ready,
               "provisioned": ready, "queue_depth": 0.0, "p99_s": None, "desired": ready, "current": ready,
               "capacity_rpm": cap, "forecast_model": "seasonal_naive"}
        redis_client.hset(shadow.key(prefix, "chat", t.strftime("%Y-%m-%d")), rec["minute"], json.dumps(rec))


@pytest.fixture
def settings(tmp_path, redis_server_url, key_prefix):
    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS)
    return load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                         state_dir=tmp_path / "state", models_dir=tmp_path / "models", dry_run=True)


def _window() -> tuple[datetime, datetime]:
    return START.to_pydatetime(), (START + pd.Timedelta(minutes=MINUTES)).to_pydatetime()


def test_the_simulated_runs_records_are_found_with_the_readmes_command(settings, redis_client, key_prefix):
    _seed(redis_client, f"{key_prefix}:sim", ready=2, cap=300.0)   # where `run --simulate` keeps them
    rep = build(settings, "chat", *_window(), "seasonal_naive", client=redis_client)
    assert rep.doc["minutes"] == MINUTES and rep.doc["key_prefix"] == f"{key_prefix}:sim"
    assert "warmcast run --simulate" in summary(rep.doc)


def test_a_negative_saving_is_said_as_more_used(settings, redis_client, key_prefix):
    _seed(redis_client, key_prefix, ready=1, cap=300.0)   # one instance for 600 req/min: warmcast holds more
    rep = build(settings, "chat", *_window(), "seasonal_naive", client=redis_client)
    assert rep.doc["instance_hours_saved"] < 0
    text = summary(rep.doc)
    more = -rep.doc["instance_hours_saved"]
    assert "saved -" not in text and f"warmcast would have used {more:g} more" in text


def test_the_actual_fleets_capacity_is_the_live_profiles(settings, redis_client, key_prefix):
    _seed(redis_client, key_prefix, ready=4, cap=150.0)   # night is live: 150 req/min per instance
    rep = build(settings, "chat", *_window(), "seasonal_naive", client=redis_client)
    np.testing.assert_allclose(rep.minutes["actual_capacity_rpm"].to_numpy(), 4 * 150.0)
    assert rep.doc["actual"]["minutes_short"] == 0   # 600 req/min on 4 x 150: just covered
