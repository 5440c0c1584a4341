"""Issue 32 item 1: every figure named per minute is per minute, on a 5- and a 10-minute series.

The new user's path, each step through its real entry point (CLI processes, the app, the gRPC
scaler, real Redis): ingest a coarse count series, forecast it, read /metrics, KEDA over HTTP and
gRPC, ``plan capacity``, ``plan pools`` and ``backtest fleet``.  A 10-minute series used to reach
/metrics and the plans as per-bin values under per-minute names (ten times the demand)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
DEP = "chat-pools"  # examples/deployments.yaml: capacity 40 rpm, max_replicas 16, pools, GPU types
TS = "%Y-%m-%d %H:%M:%S"


def rates(days: int = 14) -> pd.Series:
    """Requests/min with a daily cycle (peak 300, trough 100), per minute from 2024-03-04."""
    t = pd.date_range("2024-03-04", periods=days * 1440, freq="min", name="time")
    m = (t.hour * 60 + t.minute).to_numpy()
    return pd.Series(200 + 100 * np.sin(2 * np.pi * (m - 360) / 1440), index=t)


def bins(width: int, scale: float = 1.0) -> pd.Series:
    return (rates() * scale).resample(f"{width}min").sum().round()


@pytest.fixture
def env(redis_server_url, key_prefix, tmp_path):
    return {**os.environ, "PYTHONPATH": str(ROOT), "WARMCAST_REDIS_URL": redis_server_url,
            "WARMCAST_KEY_PREFIX": key_prefix, "WARMCAST_DEPLOYMENTS_FILE": str(ROOT / "examples/deployments.yaml"),
            "WARMCAST_STATE_DIR": str(tmp_path / "state"), "WARMCAST_MODELS_DIR": str(tmp_path / "models")}


def cli(args: list[str], env: dict, cwd: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", *args], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def metrics_path(text: str, level: str = "0.9") -> np.ndarray:
    out = {}
    for line in text.splitlines():
        if line.startswith(f'warmcast_forecast_requests_per_minute{{deployment="{DEP}"') and f'level="{level}"' in line:
            out[int(line.split('lead="')[1].split('"')[0])] = float(line.split()[-1])
    return np.array([out[k] for k in sorted(out)])


def grpc_demand(settings) -> float:
    import grpc

    from api.deps import build_context
    from api.keda.scaler import serve
    from api.keda.vendor import externalscaler_pb2 as pb
    from api.keda.vendor import externalscaler_pb2_grpc as rpc

    handle = serve(build_context(settings), "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{handle.port}") as ch:
            ref = pb.ScaledObjectRef(name=DEP, scalerMetadata={"metric": "forecastDemandRpm", "lead": "15"})
            return rpc.ExternalScalerStub(ch).GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref),
                                                          timeout=60).metricValues[0].metricValueFloat
    finally:
        handle.stop(grace=1)


@pytest.mark.parametrize("width", [5, 10])
def test_per_minute_figures_agree_on_a_coarse_series(width, env, tmp_path, settings, store, state, key_prefix):
    from forecaster.live import forecast_deployment
    from forecaster.registry import Registry
    from warmcast.config.pools import pool_series_name

    counts = bins(width)
    counts.rename("requests").reset_index().assign(time=lambda d: d["time"].dt.strftime(TS)).to_csv(
        tmp_path / "lb.csv", index=False)
    cli(["ingest", "lb.csv", "-d", DEP, "--format", "counts"], env, tmp_path)
    assert store.resolution(DEP) == width
    for pool, scale in (("hot", 0.8), ("cold", 0.2)):  # what `pools ingest` stores, at the series' bins
        store.upsert_frame(pool_series_name(DEP, pool), bins(width, scale).to_frame("requests"), resolution_min=width)
    listed = json.loads(cli(["forecast", "-d", DEP, "--json"], env, tmp_path))
    assert listed["resolution_min"] == width
    fc = forecast_deployment(store.frame(DEP), Registry(tmp_path / "models"), DEP, horizon=30)
    state.put_forecast(DEP, fc)  # as the workers store it: requests per bin, step_min = width
    p90_rate = np.repeat(fc.quantile(0.9) / width, width)[:30]  # the forecast's per-minute rate

    settings = settings.model_copy(update={"deployments_file": ROOT / "examples/deployments.yaml"})
    from api.app import create_app

    with TestClient(create_app(settings)) as c:
        exported = metrics_path(c.get("/metrics").text)
        keda = c.get(f"/v1/keda/{DEP}", params={"lead": 15}).json()
        hourly = [h["demand_rpm"] for h in c.get(f"/v1/deployments/{DEP}/capacity").json()["hours"]]
    np.testing.assert_allclose(exported, p90_rate, rtol=1e-3)
    assert len(exported) == 30
    assert keda["forecastDemandRpm"] == pytest.approx(exported[:16].max(), rel=1e-3)
    assert keda["forecastReplicas"] == min(16, math.ceil(keda["forecastDemandRpm"] / 40 - 1e-9))
    assert grpc_demand(settings) == pytest.approx(keda["forecastDemandRpm"], rel=1e-3)

    cli(["plan", "capacity", "-d", DEP, "--horizon", "30m", "--out", "ahead"], env, tmp_path)
    ahead = json.loads((tmp_path / "ahead/plan.json").read_text())
    assert ahead["slots"][0]["demand_rpm"] == pytest.approx(exported.max(), rel=1e-3)
    out = cli(["plan", "capacity", "-d", DEP, "--out", "day"], env, tmp_path)
    day = [s["demand_rpm"] for s in json.loads((tmp_path / "day/plan.json").read_text())["slots"]]
    top = max(counts.max() / width, exported.max())
    assert max(day) <= top * 1.001 and max(day) >= 0.9 * counts.max() / width, (max(day), top)
    assert max(hourly) <= top * 1.001 and max(hourly) >= 0.9 * counts.max() / width, (max(hourly), top)
    assert "needs 14 days" not in out  # 14 days of bins are 14 days: the weekly pattern is used

    cli(["plan", "pools", "-d", DEP, "--out", "pools.csv"], env, tmp_path)
    pools = pd.read_csv(tmp_path / "pools.csv")
    assert pools["hot_rpm"].max() == pytest.approx(0.8 * counts.max() / width, rel=0.02)
    assert pools["cold_rpm"].max() <= 0.2 * counts.max() / width * 1.001 and pools["cold_rpm"].min() > 0
    cli(["plan", "pools", "-d", DEP, "--step-min", "5", "--out", "pools5.csv"], env, tmp_path)
    fine = pd.read_csv(tmp_path / "pools5.csv")  # steps finer than the bins: no step is left empty
    assert fine["hot_rpm"].min() >= 0.8 * counts.min() / width * 0.999 and len(fine) == 288

    cli(["backtest", "fleet", "--log", "lb.csv", "--capacity-rpm", "40", "--test-start", "2024-03-17",
         "--test-end", "2024-03-18", "--out", "fleet", "--no-plot", "--policies", "static,oracle",
         "--forecaster", "seasonal_naive"], env, tmp_path)
    rep = json.loads((tmp_path / "fleet/report.json").read_text())
    day_bins = counts["2024-03-17"]
    assert rep["meta"]["requests"] == int(day_bins.sum())
    assert rep["policies"]["oracle"]["max_replicas"] == math.ceil(day_bins.max() / width / 40 - 1e-9)
