"""Issue 44 with issue 43's fleet model: a shard's forecast step forecasts every deployment the fleet
model serves in one batched call, and stores what the per-deployment steps store."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forecaster"))
from fc_panel import long_frame, noisy_panel  # noqa: E402

DEPS = "deployments:\n" + "".join(
    f"  - name: {d}\n    cold_start_min: 5\n    scaler: {{kind: dryrun}}\n    max_replicas: 1000\n"
    f"    default_profile: day\n    profiles: {{day: {{capacity_rpm: 300}}}}\n" for d in ("a", "b"))


def test_a_shard_forecasts_its_fleet_served_deployments_in_one_batched_call(redis_server_url, key_prefix,
                                                                           redis_client, tmp_path):
    from forecaster.base import DAY
    from forecaster.baselines import Persistence, SeasonalNaive
    from forecaster.global_lstm import GlobalLSTM, tiny_fleet_config
    from forecaster.global_lstm.live import fleet_data, train_fleet
    from forecaster.registry import Registry
    from warmcast.clients import ingest_rows
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.shardrun import run_shard
    from workers.steps import forecast

    from warmcast.config.settings import load_settings

    (tmp_path / "deps.yaml").write_text(DEPS)
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state",
                             models_dir=tmp_path / "models", deployments_file=tmp_path / "deps.yaml")
    # the panel's days pinned to this week's Monday: a start at any 10 minutes of the day made a
    # different panel each run, and one in CI left the fleet model 3% behind last day's bins on a
    # (pinned: 203.9 vs 252.1 and 454.1 vs 531.3 validation MAE, the verdict far from a flip)
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    end = now.floor("D") - pd.Timedelta(days=now.dayofweek)
    f = long_frame(noisy_panel(seed=0, start=str(end - pd.Timedelta(days=8))))
    long = pd.DataFrame({"series": f["model"] + "/" + f["client"], "time": f["time"], "requests": f["requests"],
                         "group": f["model"]})
    ctx = Ctx(settings, WorkerOptions(simulate=True), redis_client)
    for dep in ("a", "b"):   # b's history starts two days later: the batch stacks rows of two lengths
        rows = long if dep == "a" else long[long["time"] >= long["time"].min() + pd.Timedelta(days=2)]
        ingest_rows(ctx.store, dep, rows, True, None, 50)
    rep = train_fleet(fleet_data(ctx.store), Registry(settings.models_dir),
                      lambda h: GlobalLSTM(tiny_fleet_config(epochs=6, threads=1), horizon_min=h),
                      baselines=lambda: [Persistence(), SeasonalNaive(DAY)])
    assert all(v["serves"] for v in rep.verdicts.values()), rep.summary()

    one = {dep: forecast.step(ctx, dep).doc for dep in ("a", "b")}   # per deployment, as the plain tasks run
    shard_ctx = Ctx(settings, WorkerOptions(simulate=True), redis_client)   # another worker process's caches
    res = run_shard(shard_ctx, "forecast", 0, 1, "", "")
    assert res.ran == 2 and not res.failed, res
    answers = {dep: shard_ctx.cache[("model", dep)][1].primary for dep in ("a", "b")}
    assert answers["a"].model is answers["b"].model                # one model object for the fleet...
    assert [answers[d].batched for d in ("a", "b")] == [1, 1]      # ...and each answered from the one call
    for dep in ("a", "b"):
        doc = shard_ctx.state.get_forecast(dep)
        assert doc["model"] == one[dep]["model"] == "lstm_global" and doc["origin"] == one[dep]["origin"]
        for q, v in one[dep]["quantiles"].items():
            np.testing.assert_allclose(doc["quantiles"][q], v, rtol=1e-5, atol=1e-6)
