"""``warmcast pools ingest`` then ``warmcast plan capacity`` on a stored deployment, as a planner runs
them (real CLI process, real Redis), checked against a plan worked out by hand."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
WARMCAST = [sys.executable, "-m", "warmcast.cli"]


def _log(path: Path) -> None:
    """Two days: every minute 30 short prompts (hot) and 10 long ones (cold, by the prompt-length rule)."""
    minutes = pd.date_range("2024-03-04", periods=2 * 1440, freq="min")
    offsets = pd.to_timedelta(np.arange(40) * 1.5, unit="s")
    times = (minutes.values[:, None] + offsets.values[None, :]).ravel()
    prompt = np.tile(np.r_[np.full(30, 200), np.full(10, 5000)], len(minutes))
    pd.DataFrame({"timestamp": pd.DatetimeIndex(times).strftime("%Y-%m-%d %H:%M:%S.%f"), "input_tokens": prompt,
                  "output_tokens": 50}).to_csv(path, index=False)


@pytest.fixture
def env(redis_server_url, key_prefix, redis_client):
    yield {**os.environ, "PYTHONPATH": str(ROOT), "WARMCAST_REDIS_URL": redis_server_url,
           "WARMCAST_KEY_PREFIX": key_prefix, "WARMCAST_DEPLOYMENTS_FILE": str(ROOT / "examples/deployments.yaml")}


def _run(args, env, cwd):
    r = subprocess.run(WARMCAST + args, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_day_plan_by_gpu_type_from_stored_pool_series(tmp_path, env):
    _log(tmp_path / "log.csv")
    out = _run(["pools", "ingest", "log.csv", "-d", "chat-pools"], env, tmp_path)
    assert "chat-pools.hot: 86,400 requests" in out and "chat-pools.cold: 28,800 requests" in out

    out = _run(["plan", "capacity", "-d", "chat-pools", "--pool", "hot", "--what-if-growth", "1.3", "--out", "hot"],
               env, tmp_path)
    doc = json.loads((tmp_path / "hot/plan.json").read_text())
    # hot: 30 rpm at 60% of A100 40 / A10G 15 / L4 12 rpm -> 24 / 9 / 7.2 rpm per instance.
    # cheapest cover of 30: 3 L4 + 1 A10G = 30.6 rpm for 1.19 (1 A100 + 1 L4 1.28, 2 L4 + 2 A10G 1.26, 2 A100 2.0)
    assert len(doc["slots"]) == 24 and doc["slots"][0]["start"] == "2024-03-06 00:00"
    for s in doc["slots"]:
        assert s["demand_rpm"] == pytest.approx(30)
        assert s["instances"] == {"A100-80G": 0, "A10G": 1, "L4": 3} and s["bound"] == "slo"
    assert doc["total_cost"] == pytest.approx(24 * 1.19) and doc["all_a100_cost"] == pytest.approx(48)
    assert doc["saving_vs_all_a100"] == pytest.approx(1 - 1.19 / 2, abs=1e-4)
    # +30%: 39 rpm -> 4 L4 + 1 A10G = 37.8 is short; 3 L4 + 2 A10G = 39.6 rpm for 1.54
    w = doc["what_if"]
    assert w["changes"] == {"growth": 1.3} and w["slots"][0]["instances"] == {"A100-80G": 0, "A10G": 2, "L4": 3}
    assert w["delta_cost"] == pytest.approx(24 * (1.54 - 1.19))
    assert "saving 40.5%" in out and "what-if {'growth': 1.3}" in out
    assert len(pd.read_csv(tmp_path / "hot/plan.csv")) == 24 * 3
    assert (tmp_path / "hot/plan.png").stat().st_size > 10_000

    # cold: the batch profile needs 16k tokens (36 GB): only the A100 is an option
    out = _run(["plan", "capacity", "-d", "chat-pools", "--pool", "cold", "--out", "cold"], env, tmp_path)
    doc = json.loads((tmp_path / "cold/plan.json").read_text())
    assert set(doc["excluded"]) == {"A10G", "L4"} and "not an option" in out
    assert all(s["instances"] == {"A100-80G": 1} for s in doc["slots"])  # 10 rpm <= 60 rpm at 100%


def test_plan_errors_name_what_to_fix(tmp_path, env):
    r = subprocess.run(WARMCAST + ["plan", "capacity", "-d", "chat-pools", "--pool", "hot"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "no load stored for 'chat-pools.hot'" in r.stderr and "pools ingest" in r.stderr
    r = subprocess.run(WARMCAST + ["plan", "capacity", "-d", "chat-llama"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "no load stored" in r.stderr


def test_joint_day_plan_for_both_pools(tmp_path, env):
    _log(tmp_path / "log.csv")
    _run(["pools", "ingest", "log.csv", "-d", "chat-pools"], env, tmp_path)
    out = _run(["plan", "pools", "-d", "chat-pools", "--out", "pools.csv"], env, tmp_path)
    rows = pd.read_csv(tmp_path / "pools.csv")
    # hot 30 rpm at 60% of 40 rpm -> 2 instances (0.8 GPU, 18 GB each); cold 10 rpm = 100 requests per
    # 10-min step, one batch instance serves 600 -> 1 (1 GPU, 36 GB at 16k tokens)
    assert len(rows) == 144 and rows["start"].iloc[0] == "2024-03-06 00:00"
    assert set(rows["hot"]) == {2} and set(rows["cold"]) == {1} and set(rows["hot_bound"]) == {"slo"}
    assert set(rows["cold_bound"]) == {"deadline"} and set(rows["memory_gb"]) == {72.0}
    assert "total 62.4 GPU-hours" in out
    # the limits that bound the hot pool, as words (issue 32: printed as a Python list, "['slo']")
    assert "hot bound by: slo\n" in out + "\n" and "['" not in out, out
