"""Issue 46 item 3, acceptance: ``warmcast plan capacity`` on a 10-minute trace with max_replicas 8 prints
no saving larger than the plan really has against an all-A100 fleet held to the same max_replicas (real
CLI processes, real Redis).  The busy hours need more than 8 instances: the plan there is 8 A100s, short
of demand, and the old baseline of 13 uncapped A100s made it read as a saving."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = """deployments:
  - name: chat
    model: meta-llama/Llama-3.1-8B-Instruct
    max_replicas: 8
    default_profile: interactive
    profiles:
      interactive: {capacity_rpm: 40}
    gpu:
      types: [A100-80G, A10G, L4]
      model_memory_gb: 18
      reference: A100-80G
      capacity_rpm: {A10G: 15, L4: 12}
"""


@pytest.fixture
def env(redis_server_url, key_prefix, tmp_path):
    (tmp_path / "deployments.yaml").write_text(DEPLOYMENTS)
    return {**os.environ, "PYTHONPATH": str(ROOT), "WARMCAST_REDIS_URL": redis_server_url,
            "WARMCAST_KEY_PREFIX": key_prefix, "WARMCAST_DEPLOYMENTS_FILE": str(tmp_path / "deployments.yaml"),
            "WARMCAST_STATE_DIR": str(tmp_path / "state"), "WARMCAST_MODELS_DIR": str(tmp_path / "models")}


def _run(args: list[str], env: dict, cwd: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", *args], capture_output=True, text=True, env=env,
                       cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_plan_capacity_claims_no_saving_beyond_a_capped_all_a100_fleet(env, tmp_path):
    t = pd.date_range("2024-03-04", periods=3 * 144, freq="10min", name="time")
    m = (t.hour * 60 + t.minute).to_numpy()
    per_min = 250 + 150 * np.sin(2 * np.pi * (m - 360) / 1440)   # 100 .. 400 requests/min
    pd.DataFrame({"time": t.strftime("%Y-%m-%d %H:%M:%S"), "requests": np.round(per_min * 10)}).to_csv(
        tmp_path / "counts.csv", index=False)
    _run(["ingest", "counts.csv", "-d", "chat", "--format", "counts"], env, tmp_path)
    out = _run(["plan", "capacity", "-d", "chat", "--out", "day"], env, tmp_path)
    doc = json.loads((tmp_path / "day/plan.json").read_text())
    per_a100 = 40 * 0.8
    capped = sum(min(math.ceil(s["demand_rpm"] / per_a100 - 1e-9), 8) for s in doc["slots"])  # A100-hours
    real = 1 - doc["total_cost"] / capped
    short = [s for s in doc["slots"] if s["reason"].startswith("SLO NOT MET")]
    assert short and all(sum(s["instances"].values()) <= 8 for s in doc["slots"])
    claimed = [float(x) / 100 for x in re.findall(r"saving (-?[\d.]+)%", out)]
    assert all(c <= real + 1e-3 for c in claimed), (claimed, real, out[-600:])
    assert doc["all_a100_cost"] == pytest.approx(capped, rel=1e-4)
