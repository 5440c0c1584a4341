"""``warmcast backtest fleet`` from the command line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from wu_helpers import synthetic_minutes
from warmcast.errors import InputError
from warmcast.cli import backtest as wcli
def app() -> typer.Typer:
    root = typer.Typer()
    bt = typer.Typer()
    root.add_typer(bt, name="backtest")
    wcli.register(root, bt)
    return root


def test_fleet_command_writes_everything(tmp_path: Path) -> None:
    log = tmp_path / "load.csv"
    s = synthetic_minutes(days=3, mean=900.0, seed=4)
    s.rename("requests").to_frame().reset_index().assign(
        time=lambda d: d["time"].dt.strftime("%Y-%m-%d %H:%M:%S")).to_csv(log, index=False)
    out = tmp_path / "out"
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--capacity-rpm", "300",
                                     "--cold-start-min", "15", "--test-start", "2024-01-03", "--out", str(out),
                                     "--forecaster", "sim_seasonal_profile", "--decisions"])
    assert res.exit_code == 0, res.output
    for p in ("static", "reactive", "queue", "predictive", "oracle"):
        assert (out / f"plan_{p}.csv").exists()
    assert (out / "fleet.png").exists() and (out / "decisions_predictive.csv").exists()
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["policies"]) == {"static", "reactive", "queue", "predictive", "oracle"}
    assert "x oracle" in res.output and "predictive" in res.output


def test_fleet_command_errors_name_the_problem(tmp_path: Path) -> None:
    # Through the real entry point: a WarmcastError prints one line and exits 2.
    log = tmp_path / "load.csv"
    synthetic_minutes(days=2, seed=5).to_frame().reset_index().to_csv(log, index=False)
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "backtest", "fleet", "--log", str(log),
                        "--capacity-rpm", "300", "--test-start", "2031-01-01", "--out", str(tmp_path / "o"),
                        "--policies", "static,oracle"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "--test-start" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "backtest", "fleet", "--log", str(tmp_path / "nope.csv"),
                        "--capacity-rpm", "300", "--test-start", "2024-01-02", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_fleet_command_with_a_deployment(tmp_path: Path) -> None:
    log = tmp_path / "load.csv"
    synthetic_minutes(days=3, mean=900.0, seed=7).to_frame().reset_index().to_csv(log, index=False)
    dep = tmp_path / "deployments.yaml"
    dep.write_text(
        "deployments:\n"
        "  - name: chat\n    min_replicas: 1\n    max_replicas: 30\n    cold_start_min: 10\n"
        "    profiles:\n      day: {capacity_rpm: 300}\n      night: {capacity_rpm: 200}\n"
        "    schedule:\n      timezone: Europe/Berlin\n"
        "      windows: [{profile: night, start: '22:00', end: '07:00'}]\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--deployments-file", str(dep),
                                     "--deployment", "chat", "--test-start", "2024-01-03", "--out", str(out),
                                     "--no-plot", "--policies", "predictive,oracle",
                                     "--forecaster", "sim_seasonal_profile"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["meta"]["capacity_rpm"] == 300 and rep["meta"]["cold_start_min"] == 10
    assert rep["policies"]["predictive"]["profile_switches"] >= 1


def test_fleet_deployment_is_a_name_as_in_every_command(tmp_path: Path) -> None:
    """Issue 32: backtest fleet's --deployment took a file while every other command's takes a name."""
    log = tmp_path / "load.csv"
    synthetic_minutes(days=3, mean=900.0, seed=7).to_frame().reset_index().to_csv(log, index=False)
    dep = tmp_path / "deployments.yaml"
    dep.write_text("deployments:\n  - name: chat\n    max_replicas: 30\n    cold_start_min: 10\n"
                   "    profiles:\n      day: {capacity_rpm: 300}\n")
    args = ["backtest", "fleet", "--log", str(log), "--test-start", "2024-01-03", "--out", str(tmp_path / "out"),
            "--no-plot", "--policies", "static", "--forecaster", "seasonal_naive"]
    env = {"WARMCAST_DEPLOYMENTS_FILE": str(dep)}
    res = CliRunner().invoke(app(), [*args, "--deployment", "chat"], env=env)  # the settings' file, as others
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "out" / "report.json").read_text())["meta"]["capacity_rpm"] == 300

    old = CliRunner().invoke(app(), [*args, "--deployment", str(dep)])  # a file where a name goes
    assert isinstance(old.exception, InputError), old.output  # the CLI prints it, exit code 2
    assert str(old.exception).startswith("--deployment takes a deployment name, not a file: "
                                         f"use --deployments-file {dep} --deployment NAME")
    unknown = CliRunner().invoke(app(), [*args, "--deployment", "nope"], env=env)
    assert "unknown deployment 'nope'" in str(unknown.exception), unknown.output


CAL_DEP = ("deployments:\n"
           "  - name: chat\n    min_replicas: 1\n    max_replicas: 40\n    cold_start_min: 10\n"
           "    slo: {ttft_p99_ms: 400}\n"
           # a weighted route: the canary gets its 10% (round robin would overload a night canary beside
           # day replicas, and the breaker would keep the fleet on day: issue 42's physics)
           "    route: {httproute: chat, backends: {day: chat-day, night: chat-night}}\n"
           "    profiles:\n      day: {capacity_rpm: 300}\n      night: {capacity_rpm: 200}\n"
           "    schedule:\n      timezone: UTC\n"
           "      windows: [{profile: night, start: '20:00', end: '08:00'}]\n")


def _calibration(path: Path, rpm: float, profile: str | None, deployment: str | None = "chat") -> Path:
    """A calibration.json as ``warmcast calibrate`` writes it: capacity, and the curve of its scenario."""
    rps = rpm / 60.0
    curve = [{"rate_rps": round(rps * f, 4), "passed": f <= 1.0, "ttft_ms": {"p50": 30.0, "p95": 60.0, "p99": p99}}
             for f, p99 in ((0.1, 80.0), (0.5, 150.0), (1.0, 350.0), (1.0, 360.0), (1.2, 2500.0))]
    path.write_text(json.dumps({"deployment": deployment, "profile": profile, "slo": {"late_wait_s": 5.0},
                                "capacity": {"scenario": "short", "rps": round(rps, 4), "rpm": rpm},
                                "scenarios": {"short": {"curve": curve}}}))
    return path


def _fleet(tmp_path: Path, *extra: str, name: str = "out", env: dict | None = None):
    log = tmp_path / "load.csv"
    if not log.exists():
        synthetic_minutes(days=3, mean=900.0, seed=7).to_frame().reset_index().to_csv(log, index=False)
    dep = tmp_path / "deployments.yaml"
    dep.write_text(CAL_DEP)
    out = tmp_path / name
    res = CliRunner().invoke(app(), ["backtest", "fleet", "--log", str(log), "--deployments-file", str(dep),
                                     "--test-start", "2024-01-03", "--out", str(out), "--no-plot",
                                     "--policies", "static,predictive,oracle", "--forecaster", "sim_seasonal_profile",
                                     *extra], env=env)
    rep = json.loads((out / "report.json").read_text()) if res.exit_code == 0 else None
    return res, rep


def test_fleet_command_plans_with_the_calibration_of_its_profile_and_reports_slo_attainment(tmp_path: Path) -> None:
    declared, rep0 = _fleet(tmp_path, name="declared")
    assert declared.exit_code == 0, declared.output
    assert rep0["meta"]["profile_capacity"] == {"day": {"capacity_rpm": 300.0, "source": "declared"},
                                                "night": {"capacity_rpm": 200.0, "source": "declared"}}
    assert "slo_attainment" not in rep0["policies"]["predictive"] and "TTFT SLO" not in declared.output

    night = _calibration(tmp_path / "night.json", 120.0, "night")
    res, rep = _fleet(tmp_path, "--calibration", str(night), name="night")
    assert res.exit_code == 0, res.output
    # the night calibration is the night profile's capacity; the day profile keeps its declared one
    assert rep["meta"]["profile_capacity"] == {"day": {"capacity_rpm": 300.0, "source": "declared"},
                                               "night": {"capacity_rpm": 120.0, "source": "calibrated"}}
    assert rep["meta"]["capacity_rpm"] == 300.0 and rep["meta"]["capacity_source"] == "declared"
    assert "night 120 req/min calibrated" in res.output and "TTFT SLO min %" in res.output
    # the predictive policy runs the night on the lower calibrated capacity: more GPU-hours
    assert rep["policies"]["predictive"]["gpu_hours"] > rep0["policies"]["predictive"]["gpu_hours"]
    lc = rep["meta"]["latency_curve"]
    assert lc["bound_ms"] == 400.0 and "deployment" in lc["bound_source"] and lc["profile"] == "night"
    for pol, row in rep["policies"].items():
        assert 0.0 <= row["slo_attainment"] <= 1.0 and 0.0 <= row["slo_attainment_requests"] <= 1.0, pol
    # the static fleet is sized for the peak: its minutes are within the curve's capacity
    assert rep["policies"]["static"]["slo_attainment"] >= rep["policies"]["predictive"]["slo_attainment"]


def test_a_calibration_without_a_profile_is_the_default_profiles_and_bad_ones_are_refused(tmp_path: Path) -> None:
    url_only = _calibration(tmp_path / "url.json", 240.0, None, deployment=None)   # ``calibrate --url`` alone
    res, rep = _fleet(tmp_path, "--calibration", str(url_only))
    assert res.exit_code == 0, res.output
    assert rep["meta"]["capacity_rpm"] == 240.0 and rep["meta"]["capacity_source"] == "calibrated"
    assert rep["meta"]["profile_capacity"]["day"] == {"capacity_rpm": 240.0, "source": "calibrated"}
    # every policy plans with it: the oracle needs more than with the declared 300 req/min
    assert rep["policies"]["static"]["max_replicas"] >= 4 and rep["meta"]["oracle_gpu_hours"] > 0

    for bad, says in ((_calibration(tmp_path / "eve.json", 100.0, "evening"), "profile 'evening'"),
                      (_calibration(tmp_path / "other.json", 100.0, "day", deployment="other"), "deployment 'other'")):
        res, _ = _fleet(tmp_path, "--calibration", str(bad), name="bad")
        assert res.exit_code != 0 and says in str(res.exception), (res.output, res.exception)
    res, _ = _fleet(tmp_path, "--calibration", str(url_only), "--capacity-rpm", "100", name="both")
    assert res.exit_code != 0 and "not both" in str(res.exception)


def test_fleet_command_plans_with_the_stored_calibrations(tmp_path: Path, redis_client, key_prefix,
                                                        redis_server_url) -> None:
    from warmup.calibration.store import CalibrationStore

    doc = json.loads(_calibration(tmp_path / "night.json", 150.0, "night").read_text())
    CalibrationStore(redis_client, key_prefix).put("chat", "night", doc)
    env = {"WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state")}
    res, rep = _fleet(tmp_path, "--stored-calibrations", env=env)
    assert res.exit_code == 0, res.output
    assert rep["meta"]["profile_capacity"]["night"] == {"capacity_rpm": 150.0, "source": "calibrated"}
    assert rep["meta"]["profile_capacity"]["day"]["source"] == "declared"
    # the curve comes from a calibration of the default profile, and none is stored: no attainment
    assert "latency_curve" not in rep["meta"] and "slo_attainment" not in rep["policies"]["predictive"]


def test_a_switch_simulation_gets_every_profiles_curve_each_covering_its_capacity(tmp_path: Path) -> None:
    """Issue 26: the curves a switch is simulated with are read at a replica's absolute rate, so each
    must reach the capacity its profile is planned with; a curve that does not is refused naming it."""
    import yaml

    from warmcast.config.deployments import parse_deployments
    from warmup.sim.fleet_capacity import resolve

    dep = parse_deployments(yaml.safe_load(CAL_DEP)).deployments[0]
    day = json.loads(_calibration(tmp_path / "d.json", 300.0, "day").read_text())
    night = json.loads(_calibration(tmp_path / "n.json", 120.0, "night").read_text())
    caps = resolve(dep, None, None, {"day": day, "night": night})
    assert sorted(caps.curves) == ["day", "night"] and caps.curves["night"].points[-1][0] == pytest.approx(2.0)
    assert resolve(dep, None, None, {"night": night}).curves == {}      # one side only: no switch latency
    with pytest.raises(InputError, match=r"profile 'day': the calibration's curve \(scenarios.short.curve\) was "
                                         r"measured up to 300 req/min per replica, but the simulator plans that "
                                         r"profile with 900 req/min"):
        resolve(dep, 900.0, None, {"day": day, "night": night})          # --capacity-rpm past day's curve
    short = {**night, "capacity": {**night["capacity"], "rpm": 400.0}}  # capacity.rpm past its own curve
    with pytest.raises(InputError, match=r"profile 'night'.*up to 120 req/min.*400 req/min"):
        resolve(dep, None, None, {"day": day, "night": short})
