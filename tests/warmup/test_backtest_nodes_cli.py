"""``warmcast backtest nodes`` (issue 45) on two small synthetic count series whose daily peaks do not
coincide, one of them from another week (aligned by weekday): every policy's node and batch GPU-hours
and each deployment's lateness in report.json, the pool's picture, and a bad --log refused by name."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import yaml

FLEET = {"node_pools": [{"name": "a100", "gpu": "A100-80G", "gpus_per_node": 8, "node_lead_min": 10,
                         "max_nodes": 20}],
         "deployments": [{"name": n, "node_pool": "a100", "cold_start_min": 3, "scaler": {"kind": "dryrun"},
                          "max_replicas": 60, "profiles": {"day": {"capacity_rpm": 100}}} for n in ("chat", "code")]}


def series(path, start: str, peak_hour: float, days: int = 4) -> None:
    t = pd.date_range(start, periods=days * 1440, freq="min")
    hours = (t.hour + t.minute / 60.0).to_numpy()
    rpm = 300 + 1500 * np.exp(-0.5 * ((hours - peak_hour) / 2.0) ** 2)
    rng = np.random.default_rng(7)
    pd.DataFrame({"time": t.strftime("%Y-%m-%d %H:%M:%S"), "requests": rng.poisson(rpm)}).to_csv(path, index=False)


def run(tmp_path, *logs: str):
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    args = [sys.executable, "-m", "warmcast.cli", "backtest", "nodes", "--deployments-file", str(tmp_path / "fleet.yaml"),
            "--test-start", "2025-01-09 00:00", "--slo-late-share", "0.01", "--out", str(tmp_path / "out")]
    for x in logs:
        args += ["--log", x]
    return subprocess.run(args, capture_output=True, text=True, timeout=900, env=dict(os.environ))


def test_every_policy_reports_node_and_batch_gpu_hours_and_each_deployments_lateness(tmp_path):
    series(tmp_path / "chat.csv", "2025-01-06", peak_hour=10)            # a Monday
    series(tmp_path / "code.csv", "2024-12-30", peak_hour=20)            # a Monday one week earlier
    r = run(tmp_path, f"chat={tmp_path / 'chat.csv'}", f"code={tmp_path / 'code.csv'}")
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert set(rep["policies"]) == {"warmcast", "hpa", "hpa_balloons", "per_deployment_warmcast", "oracle"}
    for name, row in rep["policies"].items():
        assert row["node_gpu_hours"] > 0 and row["batch_gpu_hours"] >= 0, name
        assert set(row["deployments"]) == {"chat", "code"}
        assert all(0 <= d["late_share"] <= 1 for d in row["deployments"].values())
    assert rep["policies"]["hpa_balloons"]["hindsight"] is True
    assert all("slo_met" not in d for d in rep["policies"]["hpa_balloons"]["deployments"].values())
    assert "+1 weeks" in rep["alignment"]["code"]
    assert all(d["late_share"] == 0 for d in rep["policies"]["oracle"]["deployments"].values())
    assert (tmp_path / "out" / "nodes.png").stat().st_size > 10_000
    # each policy's knob per deployment, chosen on the two days before the test (the balloons' = the HPA's)
    from warmup.sim.nodes_tune import CORE_GRID, HPA_GRID, POOL_QUANTILE

    knobs = {name: row.get("knobs") for name, row in rep["policies"].items()}
    assert set(knobs["hpa"]) == {"chat", "code"} and all(k in HPA_GRID for k in knobs["hpa"].values())
    assert all(k in CORE_GRID for k in knobs["warmcast"].values()) and knobs["hpa_balloons"] == knobs["hpa"]
    assert rep["policies"]["warmcast"]["pool_quantile"] in POOL_QUANTILE
    assert rep["validation_days"] == 2.0


def test_a_log_for_a_deployment_not_on_the_pool_is_refused_by_name(tmp_path):
    series(tmp_path / "chat.csv", "2025-01-06", peak_hour=10)
    r = run(tmp_path, f"chat={tmp_path / 'chat.csv'}", f"other={tmp_path / 'chat.csv'}")
    assert r.returncode == 2 and "missing ['code'], not on the pool ['other']" in r.stderr
    assert "Traceback" not in r.stderr


def test_tuning_takes_the_cheapest_knob_within_the_slo_else_the_least_late(tmp_path):
    """warmup.sim.nodes_tune's rule on a real pool run: an SLO anything meets takes the setting with
    the fewest GPU-hours (the HPA's highest utilisation; the core's cheapest quantile and guard); an
    SLO nothing meets (no late request at all, on a deployment that is always short) takes the
    setting that left it least late."""
    from warmup.sim import load_log
    from warmup.sim.nodes import NodeParams
    from warmup.sim.nodes_backtest import NodeMember, late_share, run_policy
    from warmup.sim.nodes_inputs import inputs_for
    from warmup.sim.nodes_tune import CORE_GRID, HPA_GRID, tune

    series(tmp_path / "chat.csv", "2025-01-06", peak_hour=10)
    log = load_log(tmp_path / "chat.csv")
    easy = NodeMember("easy", log, 100.0, instance_lead_min=3, late_share=1.0)
    short = NodeMember("short", log, 100.0, instance_lead_min=3, max_replicas=5, late_share=0.0)
    p = NodeParams(8, 10, 20)
    val = inputs_for([easy, short], pd.Timestamp("2025-01-08"), "seasonal_naive", pd.Timestamp("2025-01-09"))
    hpa = tune("hpa", [easy, short], val, p)
    assert hpa["easy"] == HPA_GRID[0]
    cost = [float(run_policy("warmcast", [easy], val, p, knobs={"easy": k}).runs["easy"].provisioned.sum())
            for k in CORE_GRID]
    assert cost[CORE_GRID.index(tune("warmcast", [easy], val, p)["easy"])] == min(cost), cost
    assert len(set(cost)) > 1   # the settings differ on this log: the choice is not any setting's
    late = []
    for k in HPA_GRID:
        run = run_policy("hpa", [easy, short], val, p, knobs={"easy": k, "short": k})
        late.append(late_share(run, "short", val.arrivals["short"].sum(axis=1)))
    assert min(late) > 0 and late[HPA_GRID.index(hpa["short"])] == min(late), (hpa, late)
