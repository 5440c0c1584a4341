"""Issue 43, live: a log with a client column is ingested, the fleet model is trained once over the
fleet, and the deployment's reconciled forecast is what the CLI, the API, KEDA and the workers'
forecast step serve, the model named; a client column with 100,000 distinct values stays within
the bound and says so; the nightly fleet retrain audits each deployment's verdict."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forecaster"))
from fc_panel import long_frame, noisy_panel  # noqa: E402

from test_same_forecast import FLEET as TWO, cli_forecast  # noqa: E402

FLEET = TWO.replace("name: coarse", "name: a").replace("name: fine", "name: b")


def cli(settings, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMCAST_")}
    env.update(WARMCAST_REDIS_URL=settings.redis_url, WARMCAST_KEY_PREFIX=settings.key_prefix,
               WARMCAST_STATE_DIR=str(settings.state_dir), WARMCAST_MODELS_DIR=str(settings.models_dir),
               WARMCAST_DEPLOYMENTS_FILE=str(settings.deployments_file), PYTHONPATH=str(ROOT),
               WARMCAST_CLIENTS_MAX=str(settings.clients_max))
    out = subprocess.run([sys.executable, "-m", "warmcast.cli", *args], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def live_log(tmp_path: Path) -> Path:
    """Eight days of two deployments' clients in 10-minute counts, ending at this week's Monday 00:00
    (the workers forecast only a series whose newest bin is within the history window: a week), as a
    count file with model and client columns.  Pinned to a Monday because a start at any 10 minutes
    of the day makes another panel, and on some the fleet model's lead over last day's bins shrank to
    1-5% (a verdict that can flip)."""
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    end = now.floor("D") - pd.Timedelta(days=now.dayofweek)
    panel = noisy_panel(seed=0, start=str(end - pd.Timedelta(days=8)))
    path = tmp_path / "clients.csv"
    long_frame(panel).to_csv(path, index=False)
    return path


@pytest.fixture
def fleet_settings(settings, tmp_path):
    (tmp_path / "fleet.yaml").write_text(FLEET)
    return settings.model_copy(update={"deployments_file": tmp_path / "fleet.yaml"})


def test_a_client_log_is_served_by_the_fleet_model_alike_everywhere(fleet_settings, redis_client, tmp_path):
    from api.app import create_app
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import forecast

    log = live_log(tmp_path)
    for dep in ("a", "b"):
        out = cli(fleet_settings, "ingest", str(log), "-d", dep, "--series-col", "client")
        assert f"deployment {dep}: 3 client series stored" in out, out
    trained = cli(fleet_settings, "train", "--fleet", "--quick")
    assert "a                        serves: validation MAE" in trained, trained

    shown = cli_forecast(fleet_settings, "a")
    assert shown["model"] == "lstm_global" and shown["version"] == "fleet/v0001"
    assert "fleet model fleet/v0001, reconciled by" in shown["note"] and "over 3 client series" in shown["note"]
    p90 = np.array([row["p90"] for row in shown["forecast"]])
    with TestClient(create_app(fleet_settings)) as c:
        api = c.get("/v1/deployments/a/forecast", params={"horizon": 30}).json()
        keda = c.get("/v1/keda/a", params={"lead": 29, "quantile": 0.9}).json()
    assert api["model"] == "lstm_global" and api["note"] == shown["note"] and api["origin"] == shown["origin"]
    np.testing.assert_allclose(api["quantiles"]["0.9"], p90, atol=0.006)
    assert keda["forecastDemandRpm"] == pytest.approx(p90.max() / 10, abs=0.006)
    ctx = Ctx(fleet_settings, WorkerOptions(simulate=True), redis_client)
    worker = forecast.step(ctx, "a")
    assert worker.model == "lstm_global" and worker.origin == shown["origin"]
    np.testing.assert_allclose(worker.doc["quantiles"]["0.9"], p90, atol=0.006)
    # the tick plans on that forecast, and its audit names the model
    from workers.shardrun import run_plan, run_scrape

    run_scrape(ctx, "a")
    assert run_plan(ctx, "a")["status"] == "applied"
    entry = ctx.state.audit_log("a", "scale")[-1]
    assert entry["inputs"]["forecast_model"] == "lstm_global", entry


def test_a_client_column_with_100000_values_stays_within_the_bound_and_says_so(fleet_settings, tmp_path):
    from warmcast.clients import OTHER, ClientStore
    from warmcast.runtime import open_store

    n = 100_000
    t0 = pd.Timestamp("2025-01-06")
    rng = np.random.default_rng(5)
    log = pd.DataFrame({"time": (t0 + pd.to_timedelta(rng.integers(0, 3 * 1440, n), unit="min")).sort_values(),
                        "client": [f"key-{i}" for i in range(n)]})
    log.loc[: n // 10, "client"] = "key-busy"   # one client sends a tenth of the requests
    path = tmp_path / "requests.csv"
    log.to_csv(path, index=False)
    out = cli(fleet_settings.model_copy(update={"clients_max": 20}), "ingest", str(path), "-d", "a", "--series-col",
              "client")
    distinct = log["client"].nunique()
    assert f"19 client series stored; {distinct - 19:,} more clients summed into 'other'" in out, out
    assert "WARMCAST_CLIENTS_MAX" in out
    store = open_store(fleet_settings)
    names = ClientStore(store, "a").names()
    assert len(names) == 20 and "key-busy" in names.values() and OTHER in names
    frames = ClientStore(store, "a").frames()
    assert sum(f["requests"].sum() for f in frames.values()) == n == store.frame("a")["requests"].sum()


def test_the_nightly_fleet_retrain_audits_every_deployments_verdict(fleet_settings, redis_client, tmp_path):
    from forecaster.base import DAY
    from forecaster.baselines import Persistence, SeasonalNaive
    from forecaster.global_lstm import GlobalLSTM, tiny_fleet_config
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import retrain

    log = live_log(tmp_path)
    for dep in ("a", "b"):
        cli(fleet_settings, "ingest", str(log), "-d", dep, "--series-col", "client")
    ctx = Ctx(fleet_settings, WorkerOptions(simulate=True), redis_client)
    out = retrain.fleet_step(ctx, make_model=lambda h: GlobalLSTM(tiny_fleet_config(epochs=6, threads=1), horizon_min=h),
                             baselines=lambda: [Persistence(), SeasonalNaive(DAY)])
    assert out.version == "v0001" and out.serves == ["a", "b"], out
    for dep in ("a", "b"):
        rows = ctx.state.audit_log(dep, "retrain")
        assert rows and rows[-1]["decision"] == "fleet model v0001 serves", rows
        assert rows[-1]["reason"].startswith("validation MAE")
