"""Shadow mode end to end (issue 30): a simulated fleet scaled by the simulator's reactive (HPA-like)
policy, the "current autoscaler", carries a whole day of the Azure 2024 conversation trace while
warmcast runs in forecast-only mode beside it on real Redis and Celery: each replayed minute the
driver (``workers/shadow_replay.py``) publishes the fleet in Redis and sends ``warmcast.plan``, with
the minute as its clock, to a real Celery worker process, whose tick reads that fleet and writes the
shadow record (no beat: the driver is the clock).  Then ``warmcast report shadow`` (the CLI, a real
process) reads the shadow records: its actual instance-hours and late
requests are the simulated fleet's, and its warmcast-side figures are `warmcast backtest fleet`'s
on the same arrivals.  Bad input (no records, not forecast-only, a gap) gets a message naming it.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from warmcast.config.settings import load_settings
from warmcast.state import StateStore
from warmcast.store import LoadStore
from warmup.sim import load_log
from workers import shadow
from workers.shadow_replay import run_shadow
from loophelpers import Loop, cli, cli_env, wait_for

DEPLOYMENTS = """deployments:
  - name: chat
    cold_start_min: 10
    min_replicas: 2
    max_replicas: 40
    profiles:
      day: {capacity_rpm: 300}
"""
START, END = "2024-05-15 00:00", "2024-05-16 00:00"     # a whole day: on its ramps the reactive fleet runs short
FIGURES = ["gpu_hours", "late_requests", "late_share", "minutes_short", "minutes_with_late", "launches",
           "scale_actions", "mean_replicas", "max_replicas", "requests"]


@pytest.fixture
def env(tmp_path, redis_server_url, key_prefix) -> dict[str, str]:
    return cli_env(tmp_path, DEPLOYMENTS, redis_server_url, key_prefix, WARMCAST_DRY_RUN="true")


@pytest.fixture
def celery(env, tmp_path):
    """A real Celery worker process in forecast-only mode reading the replayed fleet, and an app to send to it."""
    from workers.app import make_celery
    from workers.options import WorkerOptions

    loop = Loop(tmp_path, env["WARMCAST_REDIS_URL"], env["WARMCAST_KEY_PREFIX"],
                {**env, "WARMCAST_WORKERS_REPLAYED_FLEET": "true", "WARMCAST_WORKERS_LEASE_S": "60"})
    loop.worker(concurrency=1)
    settings = load_settings(redis_url=env["WARMCAST_REDIS_URL"], key_prefix=env["WARMCAST_KEY_PREFIX"])
    app = make_celery(settings, WorkerOptions())
    app.worker_log = lambda: (tmp_path / "worker-1.log").read_text()
    try:
        from workers.replay_worker import answers

        wait_for(lambda: answers(app, "warmcast"), 120, "the Celery worker to run a ping task", loop)
        yield app
    finally:
        loop.stop_all()


def _shadow_day(env, redis_client, trace, celery):
    """The history before the window in the load store (as ingest keeps it), then the shadowed replay."""
    data = load_log(trace)
    ts, te = pd.Timestamp(START), pd.Timestamp(END)
    before = data.frame()[data.frame().index < ts]
    LoadStore(redis_client, env["WARMCAST_KEY_PREFIX"]).upsert_frame("chat", before, now_ns=ts.value)
    settings = load_settings(redis_url=env["WARMCAST_REDIS_URL"], key_prefix=env["WARMCAST_KEY_PREFIX"],
                             deployments_file=env["WARMCAST_DEPLOYMENTS_FILE"], state_dir=env["WARMCAST_STATE_DIR"],
                             dry_run=True)
    # an HPA run hot (target 100% of capacity): every rise in load finds it short for a cold start
    return run_shadow(settings, "chat", data, ts, te, "seasonal_naive", client=redis_client, utilisation=1.0,
                      celery=celery)


def test_shadow_report_matches_the_simulated_fleet_and_the_backtest(env, tmp_path, redis_client, key_prefix,
                                                                    shared_data, celery):
    trace = shared_data / "azure2024_conversation_per_minute.csv"
    run = _shadow_day(env, redis_client, trace, celery)
    minutes = len(run.provisioned)
    assert minutes == 1440
    # every tick ran in the worker process: the last journal entry is a Celery task's, at the last minute
    journal = StateStore(redis_client, key_prefix).get("plan-journal", "chat")
    assert journal["tick"] == "2024-05-15T23:59:00" and not journal["task_id"].startswith("replay-")
    assert celery.worker_log().count("Task warmcast.plan[") >= minutes
    rep = cli(env, "report", "shadow", "-d", "chat", "--since", START, "--until", END, "--forecaster",
               "seasonal_naive", "--out", str(tmp_path / "shadow"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    doc = json.loads((tmp_path / "shadow" / "report.json").read_text())
    # the records' minutes: the tick at minute t describes minute t - 1, so the last one closes 23:58
    assert doc["minutes"] == minutes - 1 and doc["compared"]["last_minute"] == "2024-05-15 23:58"
    assert doc["actual"]["instance_hours"] == round(float(run.provisioned[:-1].sum()) / 60.0, 3)
    assert doc["actual"]["late_requests"] == round(float(run.late[:-1].sum()), 1)
    assert doc["actual"]["late_requests"] > 0 and doc["short_actual_covered_by_warmcast"]["minutes"] > 0

    bt = cli(env, "backtest", "fleet", "--log", str(trace), "--deployment", "chat", "--stored-calibrations",
              "--stored-policy", "--policies", "predictive",
              "--test-start", START, "--test-end", "2024-05-15 23:59", "--forecaster", "seasonal_naive",
              "--no-plot", "--out", str(tmp_path / "bt"))
    assert bt.returncode == 0, bt.stderr[-3000:]
    row = json.loads((tmp_path / "bt" / "report.json").read_text())["policies"]["predictive"]
    assert {k: doc["warmcast_backtest_row"][k] for k in FIGURES} == {k: row[k] for k in FIGURES}
    assert doc["warmcast"]["instance_hours"] == row["gpu_hours"]          # one GPU per instance here
    assert doc["warmcast"]["late_requests"] == row["late_requests"]
    assert doc["instance_hours_saved"] != 0

    # evidence: every claimed minute names the scale audit entry of warmcast's decision at its start
    audit = {e["id"]: e for e in StateStore(redis_client, key_prefix).audit_log("chat", "scale", limit=2000)}
    shown = doc["short_actual_covered_by_warmcast"]["shown"]
    for c in shown:
        e = audit[c["audit_id"]]
        assert e["inputs"]["tick"][:16].replace("T", " ") == c["minute"] and e["applied"] is False
        assert c["warmcast_ready"] * doc["capacity_rpm"] >= c["arrivals"] > c["actual_ready"] * doc["capacity_rpm"]
    csv = pd.read_csv(tmp_path / "shadow" / "minutes.csv")
    assert len(csv) == minutes - 1 and (csv["actual_provisioned"].to_numpy() == run.provisioned[:-1]).all()
    assert (tmp_path / "shadow" / "shadow.png").stat().st_size > 20_000
    assert any("shaped by it" in x for x in doc["limits"]) and "limits:" in rep.stdout
    _bad_input(env, tmp_path, redis_client, key_prefix)


def _bad_input(env, tmp_path, redis_client, key_prefix) -> None:
    """No records in the window, a deployment not in forecast-only mode, a gap: each named, nothing written."""
    none = cli(env, "report", "shadow", "-d", "chat", "--since", "2024-05-10 00:00", "--until", "2024-05-11 00:00",
                "--out", str(tmp_path / "r1"))
    assert none.returncode == 2 and "no shadow records for deployment 'chat' between 2024-05-10 00:00" in none.stderr
    assert "it holds shadow records on 2024-05-15" in none.stderr, none.stderr
    live = cli({**env, "WARMCAST_DRY_RUN": "false"}, "report", "shadow", "-d", "chat", "--since", "1d",
                "--until", "2024-05-11 00:00", "--out", str(tmp_path / "r2"))
    assert live.returncode == 2 and "is not in forecast-only mode (dry_run is false" in live.stderr, live.stderr
    redis_client.hdel(shadow.key(key_prefix, "chat", "2024-05-15"), "2024-05-15 05:00", "2024-05-15 05:01")
    gap = cli(env, "report", "shadow", "-d", "chat", "--since", START, "--until", END, "--out", str(tmp_path / "r3"),
               "--forecaster", "seasonal_naive")
    assert gap.returncode == 2 and "2 minute(s) missing (2024-05-15 05:00..05:01)" in gap.stderr, gap.stderr
    assert not any((tmp_path / d).exists() for d in ("r1", "r2", "r3"))


def test_a_worker_reading_a_replayed_fleet_names_what_is_missing_and_applies_nothing(redis_client, key_prefix):
    """The worker's backend in a replay through Celery: before the driver published a fleet it says so;
    asked to act, it refuses (a shadow replay is forecast-only) and the published fleet is unchanged."""
    from warmcast.errors import InputError
    from warmup.sim.fleet import Observation, Pool
    from workers.replay_fleet import ReplayFleet, StoredFleet, publish

    state = StateStore(redis_client, key_prefix)
    stored = StoredFleet(state, "chat")
    with pytest.raises(InputError, match="no replayed fleet published for deployment 'chat'"):
        stored.signals()
    fleet = ReplayFleet(300.0)
    fleet.track({"": Pool(ready=3, booting=[5])}, 0)   # its instances' ids, as the simulator's loop has them follow
    fleet.observe(Observation(t=0, last_minute_rpm=700.0, queue_depth=2.0, ready=3, booting=1, max_wait_last_s=0.0),
                  pd.Timestamp("2024-05-15 00:00", tz="UTC").to_pydatetime())
    publish(state, "chat", fleet)
    before = state.get("replayed-fleet", "chat")
    assert stored.current() == 4 and stored.signals()["ready"] == 3 and stored.signals()["queue_depth"] == 2.0
    with pytest.raises(InputError, match="read only: run the workers in forecast-only mode"):
        stored.scale_to(9, "more")
    assert state.get("replayed-fleet", "chat") == before
