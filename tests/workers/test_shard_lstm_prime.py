"""Issue 44: a shard's forecast step forecasts the deployments one LSTM serves (the shipped default
model, which every deployment without a trained model of its own shares) in one batched call, and
each deployment's step stores what it would have stored on its own."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

DEPS = "deployments:\n" + "".join(
    f"  - name: d{i}\n    cold_start_min: 5\n    scaler: {{kind: dryrun}}\n    max_replicas: 100\n"
    f"    profiles: {{day: {{capacity_rpm: 300}}}}\n" for i in range(4))


def test_a_shard_forecasts_the_deployments_the_shipped_lstm_serves_in_one_batched_call(
        redis_server_url, key_prefix, redis_client, tmp_path, shared_data):
    from forecaster.lstm.model import LSTMForecaster
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.shardrun import run_shard
    from workers.steps import forecast

    (tmp_path / "deps.yaml").write_text(DEPS)
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state",
                             models_dir=tmp_path / "models", deployments_file=tmp_path / "deps.yaml")
    trace = pd.read_csv(shared_data / "azure2024_conversation_per_minute.csv", index_col=0,
                        parse_dates=True).iloc[:, 0]
    ctx = Ctx(settings, WorkerOptions(simulate=True), redis_client)
    names = [f"d{i}" for i in range(4)]
    end = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("min")   # live series: their newest minute is now's
    for i, name in enumerate(names):   # a week of the real trace, each at its own level and shift
        week = trace.iloc[i * 180:i * 180 + 7 * 1440 + 600]
        week.index = pd.date_range(end=end, periods=len(week), freq="min", name="time")
        ctx.store.upsert_frame(name, (week * (50 + 40 * i) / week.mean()).round().to_frame("requests"))

    one = {d: forecast.step(ctx, d).doc for d in names}   # per deployment, as the plain tasks run
    shard = Ctx(settings, WorkerOptions(simulate=True), redis_client)   # another worker process's caches
    metered: list[str] = []   # the shard counts its CPU as the primer goes, deployment by deployment
    assert forecast.prime(shard, names, meter=lambda: metered.append("once")) >= 1
    assert len(metered) == len(names)
    served = {d: shard.cache[("model", d)][1].primary for d in names}
    lstm = [d for d in names if isinstance(served[d], LSTMForecaster)]
    assert len(lstm) >= 2, {d: shard.cache[("model", d)][1].primary_note for d in names}
    model = served[lstm[0]]
    assert all(served[d] is model for d in lstm) and len(model.primed) == len(lstm)   # one object, one call
    res = run_shard(shard, "forecast", 0, 1, "", "")
    assert res.ran == 4 and not res.failed, res
    assert not model.primed   # every kept answer was taken by its deployment's step
    for d in names:
        doc = shard.state.get_forecast(d)
        assert doc["model"] == one[d]["model"] and doc["origin"] == one[d]["origin"]
        for q, v in one[d]["quantiles"].items():
            np.testing.assert_allclose(doc["quantiles"][q], v, rtol=1e-5, atol=1e-6)


def test_a_primed_answer_serves_only_the_exact_tail_it_was_made_from():
    """A write landing between the batch and the step changes the tail: the step forecasts afresh."""
    from forecaster.resolver import shipped_model

    model, why = shipped_model()
    assert model is not None, why
    model.primed.clear()   # the one shipped model of this process: another test's answers may be kept
    idx = pd.date_range("2025-01-01", periods=2 * 1440, freq="min", name="time")
    h = pd.DataFrame({"requests": 100 + 30 * np.sin(np.arange(len(idx)) / 200.0)}, index=idx)
    assert model.prime({"x": h}) == 1
    changed = h.copy()
    changed.iloc[-1, 0] += 50
    fresh = model.predict(changed)
    assert len(model.primed) == 1   # not taken by another tail
    kept = model.predict(h)
    assert not model.primed and kept.origin == fresh.origin
    assert not np.allclose(kept.quantiles[0.5], fresh.quantiles[0.5])
    np.testing.assert_allclose(kept.quantiles[0.5], model.predict(h).quantiles[0.5], rtol=1e-5)


def test_a_meter_adds_the_threads_cpu_as_it_goes():
    from prometheus_client import CollectorRegistry, Counter

    from workers.shardrun import Meter

    counter = Counter("burn_cpu_seconds", "test", registry=CollectorRegistry())
    meter = Meter(counter)
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.05:
        sum(range(1000))
    meter()
    first = counter._value.get()
    assert 0.05 <= first < 0.5
    meter()
    assert counter._value.get() - first < 0.01   # only what ran since the last call
