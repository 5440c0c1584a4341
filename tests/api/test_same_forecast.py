"""Issue 46 item 2: one forecast for one deployment and minute, whoever asks.

`warmcast forecast` (a real CLI process), `GET /v1/deployments/D/forecast`, KEDA's metrics-api route,
the gRPC external scaler and the workers' forecast step (whose stored forecast the tick plans on) give
the same numbers, on a 10-minute series and on a per-minute one.  They used to read different
history windows (the CLI all the stored load, the API its last 7 calendar days, the workers 7 days
back from the wall clock) and the workers reused an hour-old fit: persistence's P90 on a 10-minute
trace was 175,358 by the CLI and 184,457 by the API."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
FLEET = """deployments:
  - name: coarse
    cold_start_min: 5
    scaler: {kind: dryrun}
    max_replicas: 1000
    default_profile: day
    profiles: {day: {capacity_rpm: 300}}
  - name: fine
    cold_start_min: 5
    scaler: {kind: dryrun}
    max_replicas: 1000
    default_profile: day
    profiles: {day: {capacity_rpm: 300}}
"""


def load(width: int, days: int = 9, seed: int = 7) -> pd.DataFrame:
    """Nine days (more than the 7 a forecast reads) of noisy daily-cycle counts per ``width``-minute bin,
    ending with the bin before now: the workers forecast only a series that is live."""
    end = pd.Timestamp.now(tz="UTC").tz_localize(None).floor(f"{width}min")
    t = pd.date_range(end - pd.Timedelta(days=days), end - pd.Timedelta(minutes=width), freq=f"{width}min",
                      name="time")
    m = (t.hour * 60 + t.minute).to_numpy()
    rate = width * (300 + 200 * np.sin(2 * np.pi * (m - 360) / 1440))
    y = np.random.default_rng(seed).poisson(rate * np.random.default_rng(seed + 1).lognormal(0, 0.2, len(t)))
    return pd.DataFrame({"requests": y.astype(float)}, index=t)


def cli_forecast(settings, dep: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMCAST_")}
    env.update(WARMCAST_REDIS_URL=settings.redis_url, WARMCAST_KEY_PREFIX=settings.key_prefix,
               WARMCAST_STATE_DIR=str(settings.state_dir), WARMCAST_MODELS_DIR=str(settings.models_dir),
               WARMCAST_DEPLOYMENTS_FILE=str(settings.deployments_file), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "warmcast.cli", "forecast", "-d", dep, "--json"], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def grpc_demand(settings, dep: str) -> float:
    import grpc

    from api.deps import build_context
    from api.keda.scaler import serve
    from api.keda.vendor import externalscaler_pb2 as pb
    from api.keda.vendor import externalscaler_pb2_grpc as rpc

    handle = serve(build_context(settings), "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{handle.port}") as ch:
            ref = pb.ScaledObjectRef(name=dep, scalerMetadata={"metric": "forecastDemandRpm", "lead": "29"})
            return rpc.ExternalScalerStub(ch).GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref),
                                                          timeout=600).metricValues[0].metricValueFloat
    finally:
        handle.stop(grace=1)


@pytest.mark.parametrize("width", [10, 1])
def test_cli_api_keda_grpc_and_the_workers_forecast_alike(width, settings, store, redis_client, tmp_path):
    from api.app import create_app
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import forecast

    dep = "coarse" if width > 1 else "fine"
    (tmp_path / "fleet.yaml").write_text(FLEET)
    settings = settings.model_copy(update={"deployments_file": tmp_path / "fleet.yaml"})
    store.upsert_frame(dep, load(width), resolution_min=width)

    cli = cli_forecast(settings, dep)
    cli_p90 = np.array([row["p90"] for row in cli["forecast"]])
    assert cli["resolution_min"] == width and len(cli_p90) == 30 // width
    with TestClient(create_app(settings)) as c:
        api = c.get(f"/v1/deployments/{dep}/forecast", params={"horizon": 30}).json()
        keda = c.get(f"/v1/keda/{dep}", params={"lead": 29, "quantile": 0.9}).json()
    assert api["source"] == "computed" and api["origin"] == cli["origin"]
    assert api["model"] == cli["model"] and api["note"] == cli["note"]
    np.testing.assert_allclose(api["quantiles"]["0.9"], cli_p90, atol=0.006)
    # KEDA's demand is the per-minute P90's peak over the lead: with lead 29, the whole half hour
    # the CLI prints two decimals (the atol above); KEDA's figure is the unrounded one
    assert keda["forecastDemandRpm"] == pytest.approx(cli_p90.max() / width, abs=0.006)
    assert grpc_demand(settings, dep) == pytest.approx(keda["forecastDemandRpm"], abs=1e-3)

    # the workers' step stores the forecast the tick plans on, and the API then serves that one
    worker = forecast.step(Ctx(settings, WorkerOptions(simulate=True), redis_client), dep)
    assert worker.origin == cli["origin"] and worker.model == cli["model"]
    np.testing.assert_allclose(worker.doc["quantiles"]["0.9"], cli_p90, atol=0.006)
    with TestClient(create_app(settings)) as c:
        stored = c.get(f"/v1/deployments/{dep}/forecast", params={"horizon": 30}).json()
    assert stored["source"] == "stored"
    np.testing.assert_allclose(stored["quantiles"]["0.9"], cli_p90, atol=0.006)
