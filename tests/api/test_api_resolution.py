"""Issue 11: a deployment stored at 5 minutes is forecast in its bins, and the API says so; its plan
is per minute, from the forecast's per-minute rate."""
from __future__ import annotations

import numpy as np
import pandas as pd

from api_helpers import END, synthetic_frame


def test_five_minute_deployment_forecast_says_its_bins_and_plans_per_minute(client, store):
    five = synthetic_frame(days=2).resample("5min").sum()  # requests per 5 min, ~1,500 at the daily mean
    store.upsert_frame("demo", five, resolution_min=5)
    r = client.get("/v1/deployments/demo/forecast", params={"horizon": 30})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["resolution_min"] == 5 and body["unit"] == "requests per 5 min"
    assert body["horizon"] == 6 and body["origin"] == END.strftime("%Y-%m-%d %H:%M:%S")
    assert body["times"][1] == (END + pd.Timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S")
    p50 = np.array(body["quantiles"]["0.5"])
    assert 250 < p50.mean() < 1250  # the midnight trough (~100/min) per 5-minute bin, not per minute
    plan = client.get("/v1/deployments/demo/plan").json()
    demand = [s["demand_rpm"] for s in plan["steps"] if s["demand_rpm"] is not None]
    assert demand and max(demand) < 0.5 * p50.max()  # planned per minute: a bin's rate, not its total
    assert plan["steps"][1]["time"] == (END + pd.Timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    dash = client.get("/v1/deployments/demo/dashboard").json()
    assert dash["unit"] == "requests per 5 min" and dash["forecast"]["unit"] == "requests per 5 min"


def test_minute_deployment_forecast_unchanged_but_labelled(client, store):
    store.upsert_frame("demo", synthetic_frame(days=2))
    body = client.get("/v1/deployments/demo/forecast", params={"horizon": 30}).json()
    assert body["resolution_min"] == 1 and body["unit"] == "requests/min" and body["horizon"] == 30
    assert client.get("/v1/deployments/demo/dashboard").json()["unit"] == "requests/min"
