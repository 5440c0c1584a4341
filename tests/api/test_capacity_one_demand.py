"""Issue 46 item 3: /capacity and /capacity/gpu-plan plan each hour from one demand computation (one
history, one forecast), on a 10-minute series.  /capacity read the forecast the API had computed on
demand while gpu-plan read only a stored one: with a spike the forecast carries into the first hour,
/capacity planned 213.72 req/min where gpu-plan planned 27.8 for the same hour."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from api_helpers import END

DEP = "chat-pools"


@pytest.fixture
def coarse(store):
    """Three days of 10-minute bins at 25 req/min, but yesterday's first bin at 200 req/min: a day-seasonal
    forecast expects it again in the first planned hour; the hour's weighted P90 over three days does not."""
    idx = pd.date_range(END - pd.Timedelta(days=3), END - pd.Timedelta(minutes=10), freq="10min", name="time")
    per_min = np.full(len(idx), 25.0)
    per_min[idx == END - pd.Timedelta(days=1)] = 200.0
    store.upsert_frame(DEP, pd.DataFrame({"requests": per_min * 10}, index=idx), resolution_min=10)


def test_capacity_and_gpu_plan_plan_each_hour_from_the_same_demand(example_client, coarse):
    c = example_client
    r = c.get(f"/v1/deployments/{DEP}/forecast")  # none stored: computed on demand, the API keeps it
    assert r.status_code == 200 and r.json()["resolution_min"] == 10, r.text
    first = max(r.json()["quantiles"]["0.9"][:6]) / 10   # its first hour, per minute
    hourly = [h["demand_rpm"] for h in c.get(f"/v1/deployments/{DEP}/capacity").json()["hours"]]
    slots = [s["demand_rpm"] for s in c.get(f"/v1/deployments/{DEP}/capacity/gpu-plan").json()["slots"]]
    assert hourly == pytest.approx(slots, rel=1e-3)
    assert hourly[0] == pytest.approx(first, rel=1e-3) and 150 < hourly[0] < 400   # a per-minute rate
    assert max(hourly[1:]) < 60
