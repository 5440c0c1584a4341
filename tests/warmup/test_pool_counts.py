"""Issue 46 item 4: ``plan pools`` from a count series (real CLI processes, real Redis).

A count series holds no request to attribute ("per-pool series need one row per request"): ``pools
ingest`` now splits it as the user says, a share of each bin to the hot pool (``--hot-share``) or the
file's own per-pool count columns (``--pool-columns``), and without either refuses saying exactly how."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEP = "chat-pools"   # examples/deployments.yaml: hot and cold pools


@pytest.fixture
def env(redis_server_url, key_prefix, tmp_path):
    return {**os.environ, "PYTHONPATH": str(ROOT), "WARMCAST_REDIS_URL": redis_server_url,
            "WARMCAST_KEY_PREFIX": key_prefix, "WARMCAST_DEPLOYMENTS_FILE": str(ROOT / "examples/deployments.yaml")}


def _cli(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warmcast.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def _counts(path: Path, **cols: np.ndarray) -> pd.DatetimeIndex:
    t = pd.date_range("2024-03-04", periods=2 * 144, freq="10min", name="time")
    m = (t.hour * 60 + t.minute).to_numpy()
    total = np.round(10 * (30 + 10 * np.sin(2 * np.pi * m / 1440)))
    data = {"time": t.strftime("%Y-%m-%d %H:%M:%S"), "requests": total}
    data.update({k: v(total) for k, v in cols.items()})
    pd.DataFrame(data).to_csv(path, index=False)
    return t


def test_a_count_series_without_a_split_is_refused_saying_how(env, tmp_path, store):
    _counts(tmp_path / "counts.csv")
    r = _cli(["pools", "ingest", "counts.csv", "-d", DEP], env, tmp_path)
    assert r.returncode == 2
    assert "count series" in r.stderr and "--hot-share 0.8" in r.stderr and "--pool-columns" in r.stderr
    assert store.deployments() == []
    # plan pools without pool series says the same way in
    r = _cli(["plan", "pools", "-d", DEP], env, tmp_path)
    assert r.returncode != 0 and "--hot-share" in r.stderr, r.stderr[-500:]


def test_a_share_per_pool_splits_each_bin_and_plan_pools_runs(env, tmp_path, store):
    _counts(tmp_path / "counts.csv")
    r = _cli(["pools", "ingest", "counts.csv", "-d", DEP, "--hot-share", "0.75"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    total = pd.read_csv(tmp_path / "counts.csv")["requests"].to_numpy()
    hot, cold = store.series(f"{DEP}.hot"), store.series(f"{DEP}.cold")
    assert store.resolution(f"{DEP}.hot") == 10 and store.resolution(f"{DEP}.cold") == 10
    np.testing.assert_allclose(hot.to_numpy(), 0.75 * total)
    np.testing.assert_allclose(cold.to_numpy(), 0.25 * total)
    assert "75% of each bin" in r.stdout
    r = _cli(["plan", "pools", "-d", DEP, "--out", "pools.csv"], env, tmp_path)
    assert r.returncode == 0, r.stderr[-1000:]
    assert len(pd.read_csv(tmp_path / "pools.csv")) == 144


def test_per_pool_count_columns_are_stored_as_they_are(env, tmp_path, store):
    _counts(tmp_path / "counts.csv", hot_n=lambda t: np.round(t * 0.6), cold_n=lambda t: t - np.round(t * 0.6))
    r = _cli(["pools", "ingest", "counts.csv", "-d", DEP, "--pool-columns", "hot_n,cold_n"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "counts.csv")
    np.testing.assert_allclose(store.series(f"{DEP}.hot").to_numpy(), df["hot_n"].to_numpy())
    np.testing.assert_allclose(store.series(f"{DEP}.cold").to_numpy(), df["cold_n"].to_numpy())
    bad = _cli(["pools", "ingest", "counts.csv", "-d", DEP, "--pool-columns", "hot_n"], env, tmp_path)
    assert bad.returncode == 2 and "--pool-columns" in bad.stderr and "HOT,COLD" in bad.stderr


def test_a_split_given_for_a_request_log_is_refused(env, tmp_path):
    pd.DataFrame({"timestamp": ["2024-01-01 00:00:05"], "input_tokens": [10], "output_tokens": [5]}).to_csv(
        tmp_path / "log.csv", index=False)
    r = _cli(["pools", "ingest", "log.csv", "-d", DEP, "--hot-share", "0.5"], env, tmp_path)
    assert r.returncode == 2 and "pools.attribution" in r.stderr
