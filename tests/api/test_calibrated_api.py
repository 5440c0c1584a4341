"""The API plans with the stored calibration (issue 15) and says which capacity it used."""
from __future__ import annotations

import numpy as np

from api_helpers import stored_forecast
from warmup.calibration.store import CalibrationStore


def test_keda_values_deployments_and_metrics_use_and_name_the_calibrated_capacity(client, seeded, state,
                                                                               redis_client, key_prefix):
    peak = float(max(stored_forecast().quantiles[0.9][:16]))
    before = client.get("/v1/keda/demo", params={"quantile": 0.9, "lead": 15}).json()
    assert before["capacitySource"] == "declared" and before["forecastReplicas"] == int(np.ceil(peak / 200))
    # 00:00 is in the demo's night window (declared 200 req/min): a calibration says 50
    CalibrationStore(redis_client, key_prefix).put("demo", "night", {"capacity": {"rpm": 50.0}, "created_at": "t"})
    after = client.get("/v1/keda/demo", params={"quantile": 0.9, "lead": 14}).json()  # another lead: not cached
    assert after["capacitySource"] == "calibrated" and after["capacityPerInstanceRpm"] == 50.0
    assert after["forecastReplicas"] == int(np.ceil(float(max(stored_forecast().quantiles[0.9][:15])) / 50))
    dep = client.get("/v1/deployments").json()["deployments"][0]
    assert dep["profiles"]["night"] == 50.0 and dep["capacity_sources"] == {"day": "declared", "night": "calibrated"}
    state.put("calibration-drift", "demo", {"profile": "night", "factor": 1.3, "drifted": True})
    text = client.get("/metrics").text
    assert 'warmcast_calibration_drift{deployment="demo",profile="night"} 1.0' in text
    assert 'warmcast_calibration_correction{deployment="demo",profile="night"} 1.3' in text
