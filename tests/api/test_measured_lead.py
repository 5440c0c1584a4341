"""The API plans with the lead the workers' planner uses (issue 13): a launch-to-ready time the
worker records moves /v1/keda's lead and forecast peak, and the answer names the source."""
from __future__ import annotations

import pytest

from api_helpers import stored_forecast
from workers import lead
from workers.context import Ctx
from workers.options import WorkerOptions


def test_a_measured_launch_moves_the_keda_lead_and_names_its_source(client, seeded, settings, redis_client):
    p90 = stored_forecast().quantiles[0.9]  # rising ramp: a shorter lead sees a lower peak
    before = client.get("/v1/keda/demo").json()
    assert (before["leadMinutes"], before["leadSource"]) == (15, "deployments file")  # the demo's cold_start_min
    assert before["forecastDemandRpm"] == pytest.approx(float(max(p90[:16])), rel=1e-3)

    # recorded exactly as the signals step records a launch it saw booting, then ready
    worker = Ctx(settings, WorkerOptions(), client=redis_client)
    lead.record(worker, "demo", [120.0])
    assert lead.resolve(worker, "demo").source == "measured launches"

    # another utilisation: a new answer, not the one reused for 5 s (api/hot.py); the peak does not depend on it
    after = client.get("/v1/keda/demo", params={"utilisation": 0.5}).json()
    assert (after["leadMinutes"], after["leadSource"]) == (2, "measured launches")
    assert after["forecastDemandRpm"] == pytest.approx(float(max(p90[:3])), rel=1e-3)
    assert after["forecastDemandRpm"] < before["forecastDemandRpm"]

    plan = client.get("/v1/deployments/demo/plan").json()  # no stored plan: the API's computed one
    assert plan["source"] == "computed" and plan["lead"]["source"] == "measured launches"
    assert plan["lead"]["cold_start_min"] == pytest.approx(2.0)
    assert len(plan["steps"]) == 30 - 2 and "cold start from measured launches" in plan["steps"][0]["reason"]

    asked = client.get("/v1/keda/demo", params={"lead": 5}).json()  # a lead in the request wins, and says so
    assert (asked["leadMinutes"], asked["leadSource"]) == (5, "request")


def test_the_api_plans_with_the_live_policy_config_the_workers_use(client, seeded, settings, redis_client):
    """A stored policy-config (an operator's or the nightly re-tune's) reaches the API's plan as it
    reaches the worker's: both build their core config through workers.coreconfig.live_core_config."""
    before = client.get("/v1/deployments/demo/plan").json()
    worker = Ctx(settings, WorkerOptions(), client=redis_client)
    worker.state.put("policy-config", "demo", {"scaling": {"margin_min": 5.0}})
    assert worker.cfg("demo").scaling.margin_min == 5.0
    after = client.get("/v1/deployments/demo/plan").json()
    # the look-ahead is cold start + margin: 5 more minutes of it leave 5 fewer whole windows in the horizon
    assert len(after["steps"]) == len(before["steps"]) - 5
