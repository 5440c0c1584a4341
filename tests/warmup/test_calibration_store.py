"""Stored calibrations (versioned per deployment and profile, YAML export), the capacity the core
plans with, and `warmcast calibrate`'s command line where no server is needed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from warmup.calibration.store import CalibrationStore, capacities
from warmcast.config.deployments import DeploymentsFile
from warmcast.errors import InputError, NotFoundError
from warmup.actuators.local import free_port
from warmup.core.adapters import core_config
from warmup.core import plan_replicas

ROOT = Path(__file__).resolve().parents[2]
DEPS = {"deployments": [{"name": "cd", "min_replicas": 1, "max_replicas": 50,
                         "profiles": {"day": {"capacity_rpm": 100}, "night": {"capacity_rpm": 80}}}]}


def _dep():
    return DeploymentsFile.model_validate(DEPS).deployments[0]


def test_versions_current_rollback_and_yaml_export(redis_client, key_prefix):
    store = CalibrationStore(redis_client, key_prefix)
    assert store.get("cd", "day") is None and store.current("cd") == {}
    assert store.put("cd", "day", {"capacity": {"rpm": 60.0}, "created_at": "a"}) == 1
    assert store.put("cd", "day", {"capacity": {"rpm": 70.0}, "created_at": "b"}) == 2
    assert store.versions("cd", "day") == [1, 2] and store.get("cd", "day")["capacity"]["rpm"] == 70.0
    store.set_current("cd", "day", 1)
    assert store.get("cd", "day")["version"] == 1
    with pytest.raises(NotFoundError, match="no calibration v9"):
        store.set_current("cd", "day", 9)
    with pytest.raises(InputError, match="capacity.rpm"):
        store.put("cd", "day", {"capacity": {"rpm": -1}})
    assert store.versions("cd", "day") == [1, 2]  # the bad one stored nothing
    exported = yaml.safe_load(store.export_yaml("cd"))
    assert exported["calibrations"]["day"]["current"] == 1
    assert [v["capacity"]["rpm"] for v in exported["calibrations"]["day"]["versions"]] == [60.0, 70.0]


def test_calibrated_capacity_changes_the_core_plan_and_its_reason():
    dep = _dep()
    caps = capacities(dep, {"day": {"capacity": {"rpm": 40.0}, "version": 3, "created_at": "x"}})
    assert caps["day"].source == "calibrated" and caps["night"].source == "declared"
    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    declared = plan_replicas(core_config(dep), None, now, observed_rpm=390.0)[0]
    calibrated = plan_replicas(core_config(dep, capacities=caps), None, now, observed_rpm=390.0)[0]
    assert (declared.desired, calibrated.desired) == (4, 10)
    assert declared.capacity_source == "declared" and "declared" in declared.reason
    assert calibrated.capacity_source == "calibrated" and "40 req/min per replica, calibrated" in calibrated.reason


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warmcast.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_help_documents_every_option():
    # every option the command has (from click, not a list kept by hand): named in --help, with help text
    import typer

    from warmcast import cli as wcli

    wcli._register_all()
    cmd = typer.main.get_command(wcli.app).commands["calibrate"]
    # typer vendors its own click, so options are told by their kind rather than by click's class
    options = [p for p in cmd.get_params(cmd.context_class(cmd)) if p.param_type_name == "option"]
    assert len(options) >= 30 and {"--slo-late-share", "--url", "--config"} <= {o for p in options for o in p.opts}
    out = _cli("calibrate", "--help", env={"COLUMNS": "200"}).stdout
    for p in options:
        assert (p.help or "").strip(), f"{p.opts[0]} has no help text"
        for name in (*p.opts, *p.secondary_opts):
            assert name in out, name


def test_unreachable_server_ends_clearly_and_keeps_the_stored_calibration(tmp_path, redis_client, key_prefix,
                                                                          redis_server_url):
    deps = tmp_path / "deployments.yaml"
    deps.write_text(yaml.safe_dump(DEPS))
    env = {"WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_DEPLOYMENTS_FILE": str(deps), "WARMCAST_STATE_DIR": str(tmp_path / "state")}
    store = CalibrationStore(redis_client, key_prefix)
    store.put("cd", "day", {"capacity": {"rpm": 42.0}})
    out = tmp_path / "cal"
    out.mkdir()
    (out / "calibration.json").write_text(json.dumps({"previous": True}))
    url = f"http://127.0.0.1:{free_port(18800)}"
    r = _cli("calibrate", "--url", url, "-d", "cd", "--out", str(out), env=env)
    assert r.returncode == 2 and f"server {url} is unreachable" in r.stderr, r.stderr
    bad = _cli("calibrate", "--url", url, "-d", "cd", "--out", str(out), "--scenarios", "huge", env=env)
    assert bad.returncode == 2 and "huge" in bad.stderr and "short, medium, long, mix" in bad.stderr
    assert store.versions("cd", "day") == [1] and store.get("cd", "day")["capacity"]["rpm"] == 42.0
    assert json.loads((out / "calibration.json").read_text()) == {"previous": True}


def test_fleet_backtest_reads_the_capacity_of_a_calibration_file(tmp_path):
    from warmup.sim.fleet_capacity import read_calibration, resolve

    good, bad = tmp_path / "calibration.json", tmp_path / "other.json"
    good.write_text(json.dumps({"capacity": {"rpm": 61.5}}))
    bad.write_text(json.dumps({"capacity": {}}))
    assert read_calibration(good)["capacity"]["rpm"] == 61.5
    with pytest.raises(InputError, match="other.json: not a calibration.json"):
        read_calibration(bad)
    # a file with a capacity and no curve still sets the capacity; it says why there is no attainment
    caps = resolve(_dep(), None, read_calibration(good))
    assert (caps.capacity_rpm, caps.source, caps.profiles["night"].source) == (61.5, "calibrated", "declared")
    assert caps.latency is None and "no latency curve" in caps.note
