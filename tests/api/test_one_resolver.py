"""Issue 11: one model resolver. For one stored deployment, `warmcast forecast` (a real CLI
process), the API's forecast route and the workers' forecast step answer with the same model,
version and note, and the same numbers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from api_helpers import synthetic_frame

ROOT = Path(__file__).resolve().parents[2]


def _cli_forecast(settings, dep: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMCAST_")}
    env.update(WARMCAST_REDIS_URL=settings.redis_url, WARMCAST_KEY_PREFIX=settings.key_prefix,
               WARMCAST_STATE_DIR=str(settings.state_dir), WARMCAST_MODELS_DIR=str(settings.models_dir),
               PYTHONPATH=str(ROOT))
    warmcast = Path(sys.executable).parent / "warmcast"  # the console script a user runs
    out = subprocess.run([str(warmcast), "forecast", "--deployment", dep, "--json"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_cli_api_and_workers_answer_with_the_same_model_and_note(client, settings, store, redis_client):
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import forecast

    # three days up to the last whole minute: inside the workers' and the API's history windows,
    # so all three read the same frame; no model is trained, so the shipped one is judged on it
    end = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("min")
    store.upsert_frame("chat", synthetic_frame(days=3, end=end, seed=5))

    api = client.get("/v1/deployments/chat/forecast", params={"horizon": 30})  # before the workers store one
    assert api.status_code == 200, api.text
    api = api.json()
    assert api["source"] == "computed"
    cli = _cli_forecast(settings, "chat")
    worker = forecast.step(Ctx(settings, WorkerOptions(simulate=True), redis_client), "chat")

    assert "no trained model for 'chat'" in api["note"] and "shipped default model" in api["note"]
    assert api["model"] == cli["model"] == worker.model == worker.doc["model"]
    assert api["version"] == cli["version"] == worker.doc["version"]
    assert api["note"] == cli["note"] == worker.note
    assert api["origin"] == cli["origin"] == worker.origin == end.strftime("%Y-%m-%d %H:%M:%S")
    p50 = np.array(api["quantiles"]["0.5"])
    np.testing.assert_allclose(p50, [row["p50"] for row in cli["forecast"]], atol=0.01)
    np.testing.assert_allclose(p50, worker.doc["quantiles"]["0.5"], atol=0.01)
