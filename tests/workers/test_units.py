"""In-process checks of the loop's parts against the real Redis (no worker processes)."""
from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from warmcast.forecast import Forecast
from loophelpers import seed_steady

from warmcast.errors import InputError
from warmup.core import PolicyState, plan_replicas, Reason, ReasonCode, SwitchPhase, SwitchState, Transition
from workers import lead, policy
from workers.steps import forecast, ingest, retrain
from workers.steps import tick as plan
from workers.context import Ctx
from workers.coreconfig import core_config
from workers.options import WorkerOptions
from workers.schedule import beat_schedule, claim_slot, tick_id
from workers.serde import policy_state_from_json, to_json
from workers.simulate import seed_deployment


def test_policy_state_round_trips_through_json():
    t = datetime(2024, 5, 17, 8, 30, tzinfo=timezone.utc)
    ps = PolicyState(last_scale_up=t, history=((t, 3), (t, 4)), scale_actions=2,
                     switch=SwitchState(phase=SwitchPhase.CANARY, active_profile="day", target_profile="night",
                                        since=t, baseline_p99_s=1.5,
                                        transitions=(Transition(t, SwitchPhase.STEADY, SwitchPhase.PREWARM, "day",
                                                                "night", Reason(ReasonCode.SWITCH_SCHEDULE, "x")),)))
    back = policy_state_from_json(json.loads(json.dumps(to_json(ps))))
    assert back == ps
    assert policy_state_from_json(None) == PolicyState()


def test_every_periodic_entry_has_expires_and_the_issue_intervals():
    opts = WorkerOptions()
    sched = beat_schedule(opts)
    kinds = {e["kwargs"]["kind"] for e in sched.values() if e["task"] == "warmcast.fanout"}
    # the one tick ("plan") decides switches and warmups too: no periodic switch or warmup check
    assert kinds == {"scrape", "ingest", "forecast", "plan", "expire", "alerts", "retrain"}
    # the fleet model (issue 43) is fitted once a night for the whole fleet, an hour after the deployments' own
    fleet = sched["warmcast-retrain-fleet"]
    assert fleet["task"] == "warmcast.retrain_fleet" and fleet["schedule"].hour == {(opts.retrain_hour_utc + 1) % 24}
    for name, e in sched.items():
        assert e["options"]["expires"] > 0, name
    assert 5 <= opts.scrape_every_s <= 15
    assert opts.plan_every_s == opts.forecast_every_s == opts.ingest_every_s == 60
    from workers.tasks import alert_check  # the escalation check: its beat entry fans out to this task
    from workers.schedule import PERIODIC

    assert PERIODIC["alerts"][1] == alert_check.name and opts.alert_check_every_s == 30


def test_core_config_from_deployment_and_overrides():
    from warmcast.config.deployments import demo_deployment

    d = demo_deployment()
    cfg = core_config(d, dry_run=True, overrides={"scaling": {"quantile": 0.95}, "warmup": {
        "tiers": [{"name": "low", "min_queue_depth": 2, "requests": 2, "concurrency": 1}]}})
    assert cfg.dry_run and cfg.scaling.quantile == 0.95 and cfg.scaling.capacity_rpm == 300
    assert cfg.scaling.max_replicas == d.max_replicas and cfg.scaling.cold_start_min == d.cold_start_min
    assert cfg.switch.enabled and cfg.switch.windows[0].profile == "night"
    assert cfg.warmup.tiers[0].min_queue_depth == 2
    with pytest.raises(InputError, match="quantil"):
        core_config(d, overrides={"scaling": {"quantil": 0.9}})


def test_plan_is_idempotent_per_tick_and_audited_with_reason(ctx):
    seed_steady(ctx, "simdep", 350.0)
    first = plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    assert first.status == "applied" and first.desired >= 4
    again = plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    assert again.status == "duplicate"
    assert len(ctx.scaler("simdep").actions()) == 1
    rows = ctx.state.audit_log("simdep", kind="scale")
    # the simulated fleet's counters are read over the tick's real elapsed time, so on a busy
    # machine the reading is 350 give or take a request or two
    load = re.search(r"current load (\d+) req/min needs 4", rows[0]["reason"]) if len(rows) == 1 else None
    assert load and 345 <= int(load.group(1)) <= 355, rows
    assert rows[0]["inputs"]["tick"] == "T1" and rows[0]["applied"]
    # the next tick holds (targets, not increments): no new action
    assert plan.step(ctx, "simdep", tick="T2", run_id="task-b").desired == first.desired
    assert len(ctx.scaler("simdep").actions()) == 1
    assert len(ctx.state.audit_log("simdep", kind="scale")) == 2


def test_plan_preview_is_the_cores_plan_to_the_horizon_with_the_reactive_floor(ctx):
    now_min = seed_steady(ctx, "simdep", 350.0)  # the load needs 4 of 100 req/min
    path = np.array([50.0] * 29 + [900.0])  # the forecast needs 1, then 9 at its last minute
    ctx.state.put_forecast("simdep", Forecast(origin=pd.Timestamp(now_min * 60, unit="s"), mean=path, model="t",
                                              version="v", quantiles={0.1: path, 0.5: path, 0.9: path}))
    plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    journal = ctx.state.get("plan-journal", "simdep")
    preview, load = journal["plan"], journal["inputs"]["observed_rpm"]
    now = datetime.strptime(preview[0]["time"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    cfg, _ = lead.with_lead(ctx, "simdep", ctx.cfg("simdep"))
    core = plan_replicas(cfg, forecast.stored(ctx, "simdep")[1], now, load, 0.0)
    assert [(p["desired"], p["demand_rpm"]) for p in preview] == [(c.desired, c.demand_rpm) for c in core]
    assert preview[0]["desired"] == 4 and "reactive" not in preview[1]["reason"]  # the floor, now only
    assert preview[-1]["desired"] == 9 and preview[-1]["demand_rpm"] == 900.0  # the full lead at the horizon
    assert len(preview) == 30 - (int(now.timestamp() // 60) - now_min) - 1  # lead 0.5 min: 1 minute ahead


def test_policy_state_survives_in_redis_between_contexts(ctx, tmp_path):
    seed_steady(ctx, "simdep", 350.0)
    plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    # a fresh context (another worker) sees the cooldown state the first one wrote
    other = Ctx(ctx.settings, ctx.options, ctx.r)
    ps, _ = policy.load(other.state, "simdep")
    assert ps.last_scale_up is not None and ps.scale_actions == 1


def test_forecast_is_stored_and_scored_once_actuals_arrive(ctx):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    doc = forecast.step(ctx, "simdep").doc
    assert doc and len(doc["quantiles"]["0.9"]) == 30
    # the minute the forecast was for is observed: the next forecast scores the previous one
    origin = pd.Timestamp(doc["origin"])
    ctx.store.upsert_frame("simdep", pd.DataFrame({"requests": [doc["mean"][0] + 7.0]},
                                                  index=pd.DatetimeIndex([origin], name="time")))
    forecast.step(ctx, "simdep")
    err = {k.decode(): v.decode() for k, v in ctx.r.hgetall(f"{ctx.prefix}:forecast-error:simdep").items()}
    assert err["origin"] == doc["origin"] and int(err["leads_observed"]) >= 1
    p50 = doc["quantiles"]["0.5"][0]
    assert float(err["lead1_abs_error"]) == pytest.approx(abs(doc["mean"][0] + 7.0 - p50), abs=1e-3)


def test_ingest_moves_completed_minutes_into_the_load_store(ctx):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    now_min = int(time.time() // 60)
    ctx.r.set(f"{ctx.prefix}:ingested:{'simdep'}", now_min - 4)
    idx = pd.to_datetime([(now_min + k) * 60 for k in range(-3, 2)], unit="s")
    ctx.sim("simdep").load_traffic(pd.Series([11.0, 12.0, 13.0, 14.0, 15.0], index=idx))
    assert ingest.step(ctx, "simdep").minutes == 3
    s = ctx.store.series("simdep", start=idx[0])
    assert s.loc[idx[0]] == 11 and s.loc[idx[2]] == 13 and idx[3] not in s.dropna().index
    assert ingest.step(ctx, "simdep").minutes == 0  # nothing new until the minute completes


def test_manual_profile_request_runs_through_the_switch_machine(ctx, tmp_path):
    from warmcast.config.deployments import demo_deployment

    deps = tmp_path / "two.yaml"
    deps.write_text("deployments:\n  - name: simdep\n    cold_start_min: 0.5\n    profiles:\n"
                    "      day: {capacity_rpm: 100}\n      night: {capacity_rpm: 80}\n")
    c = Ctx(ctx.settings.model_copy(update={"deployments_file": deps}), ctx.options, ctx.r)
    seed_deployment(c, "simdep", mean_rpm=80)
    assert plan.step(c, "simdep", tick="T1", run_id="a").switch == "none"  # no schedule: switching off
    c.state.request_profile("simdep", "night", by="test")
    out = plan.step(c, "simdep", tick="T2", run_id="b")   # the tick runs the switch machine
    assert out.switch == "prewarm" and out.phase == "prewarm", out
    rows = c.state.audit_log("simdep", kind="switch")
    assert rows and "night" in rows[0]["decision"] and rows[0]["reason"] and rows[0]["applied"], rows
    assert demo_deployment  # the demo deployment ships with a schedule; this one switches on request only


def test_whatif_backtest_task_returns_per_policy_report(ctx, monkeypatch):
    from workers.whatif import run_whatif

    seed_deployment(ctx, "simdep", mean_rpm=120)
    frame = ctx.store.frame("simdep")
    test_start = str(frame.index[-1].floor("D") - pd.Timedelta(days=1))
    rep = run_whatif(ctx, "simdep", ["static", "reactive", "oracle"], test_start, 100.0, 5.0)
    assert set(rep["policies"]) == {"static", "reactive", "oracle"}
    for row in rep["policies"].values():
        assert row["gpu_hours"] > 0
    json.dumps(rep)  # JSON-able for the result backend
    assert rep["lead"]["source"] == "what-if request" and rep["lead"]["cold_start_min"] == 5.0
    with pytest.raises(InputError):
        run_whatif(ctx, "simdep", [], test_start, 100.0, 5.0)


def test_whatif_without_a_cold_start_replays_with_the_measured_lead(ctx):
    """No cold start in the request: the planner's lead, the P90 of measured launches here."""
    from workers import lead
    from workers.whatif import run_whatif

    seed_deployment(ctx, "simdep", mean_rpm=120)
    test_start = str(ctx.store.frame("simdep").index[-1].floor("D") - pd.Timedelta(days=1))
    for s in (240.0, 300.0, 360.0):  # launch-to-ready seconds, as lead.observe records them
        ctx.r.lpush(f"{ctx.prefix}:launch-ready:simdep", repr(s))
    want = lead.resolve(ctx, "simdep")
    rep = run_whatif(ctx, "simdep", ["static", "oracle"], test_start, 100.0)
    assert want.source == "measured launches" and want.cold_start_min != ctx.dep("simdep").cold_start_min
    assert rep["lead"] == want.as_doc()


NIGHT_DEPLOYMENTS = """
deployments:
  - name: nightdep
    cold_start_min: 2
    min_replicas: 1
    max_replicas: 10
    profiles:
      day: {{capacity_rpm: 100}}
      night: {{capacity_rpm: 50}}
    schedule:
      windows: [{{profile: night, start: "{start}", end: "{end}"}}]
"""


def test_whatif_replays_the_night_profile_as_the_planner_runs_it(tmp_path, redis_client, key_prefix,
                                                                 redis_server_url, monkeypatch):
    """The what-if replays with the planner's core config: in its night window the predictive
    policy plans the night profile's capacity and switches to it, as the live loop would."""
    from warmcast.config.settings import load_settings
    from warmup.core.plan import stage_profile
    from workers.whatif import _backtest_config, run_whatif

    now = time.time()
    end = pd.Timestamp(int(now // 60) * 60, unit="s")  # seed_deployment's history ends the minute before
    dusk = end - pd.Timedelta(minutes=90)  # the night starts inside the replayed 3 hours (a short replay)
    (tmp_path / "deps.yaml").write_text(NIGHT_DEPLOYMENTS.format(
        start=f"{dusk:%H:%M}", end=f"{dusk + pd.Timedelta(hours=8):%H:%M}"))
    c = Ctx(load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=tmp_path / "deps.yaml",
                          state_dir=tmp_path / "state"), WorkerOptions(simulate=True), redis_client)
    seed_deployment(c, "nightdep", mean_rpm=120, now=now)
    start = end - pd.Timedelta(hours=3)
    cfg = _backtest_config(c, "nightdep", 100.0, 2.0, start, ("predictive",)).core_config()
    night, day = ((t + pd.Timedelta(minutes=30)).tz_localize("UTC").to_pydatetime() for t in (dusk, start))
    assert stage_profile(cfg, night)[:2] == ("night", 50.0) and stage_profile(cfg, day)[:2] == ("day", 100.0)
    monkeypatch.setenv("WARMCAST_WORKERS_WHATIF_FORECASTER", "seasonal_naive")  # the profiles, not the model, matter
    rep = run_whatif(c, "nightdep", ["predictive"], str(start), 100.0)
    assert rep["profiles"] == {"day": 100.0, "night": 50.0}
    # At dusk the replay starts the switch to the night profile.  Whether it completes depends on the
    # synthetic day's load at that hour (a canary replica at half the capacity may trip the P99 breaker,
    # which rolls back): an attempt, completed or rolled back, is what shows the schedule was replayed.
    row = rep["policies"]["predictive"]
    assert row["profile_switches"] + row["switch_rollbacks"] >= 1 and row["switch_minutes"] > 0, row


def test_forecast_only_mode_records_but_does_not_act(ctx):
    c = Ctx(ctx.settings.model_copy(update={"dry_run": True}), ctx.options, ctx.r)
    seed_steady(c, "simdep", 350.0)
    out = plan.step(c, "simdep", tick="T1", run_id="task-a")
    row = c.state.audit_log("simdep", kind="scale")[0]
    assert out.desired >= 4 and row["decision"].startswith("up") and row["applied"] is False
    assert "forecast-only" in row["outcome"]
    assert c.scaler("simdep").current() == 1 and c.scaler("simdep").actions() == []
    ps, _ = policy.load(c.state, "simdep")
    assert ps.last_scale_up is None  # no cooldown from an action that did not happen


def test_paused_deployment_is_decided_and_recorded_but_not_acted_on(ctx):
    seed_steady(ctx, "simdep", 350.0)
    ctx.state.set_paused("simdep", True, by="test", reason="maintenance")
    plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    row = ctx.state.audit_log("simdep", kind="scale")[0]
    assert row["applied"] is False and "paused by test" in row["outcome"]
    assert ctx.scaler("simdep").actions() == []
    ctx.state.set_paused("simdep", False)
    plan.step(ctx, "simdep", tick="T2", run_id="task-b")
    assert len(ctx.scaler("simdep").actions()) == 1


class DayAgo:
    """A challenger on forecaster.base's protocol: each minute is forecast as the same minute one
    day earlier (every level the same value).  It is saved to and loaded from the registry as its
    own artifact kind, so once promoted it is the champion that serves the next forecast."""

    name = "day_ago"
    version = "0"
    levels = None
    KIND = "test-day-ago"

    def __init__(self) -> None:
        self.meta: dict = {}
        self.fit_seconds = 0.0

    def fit(self, history) -> "DayAgo":
        from forecaster.base import minute_series

        self.meta = {"train_end": str(minute_series(history).index[-1])}  # the resolver's staleness check reads it
        return self

    def predict(self, history, horizon: int = 30, quantiles=(0.1, 0.5, 0.9)) -> Forecast:
        from forecaster.base import DAY, MINUTE, minute_series

        s = minute_series(history)
        v = s.to_numpy(dtype=float)[len(s) - DAY:len(s) - DAY + horizon]
        return Forecast(s.index[-1] + MINUTE, v, {float(q): v for q in quantiles}, self.name, self.version)

    def predict_origins(self, history, origins, horizon: int = 30, quantiles=(0.1, 0.5, 0.9)) -> list[Forecast]:
        return [self.predict(history.loc[history.index < o], horizon, quantiles) for o in origins]

    def to_artifact(self) -> tuple[dict, dict]:
        return {}, {"kind": self.KIND, "training": self.meta}

    @classmethod
    def from_artifact(cls, tensors, meta) -> "DayAgo":
        model = cls()
        model.meta = dict(meta["training"])
        return model


def test_nightly_retrain_promotes_audits_and_the_next_forecast_serves_it(ctx, tmp_path):
    """The mechanism on data built so that the outcome is known before anything runs: night 1,
    days that repeat exactly, where the day-ago challenger is exact (MAE 0) and persistence is
    not, so it must be promoted; night 2, the last 36 hours flat, where persistence is exact and
    the challenger (and the champion, the same model) err, so it must be kept out."""
    from forecaster.baselines import Persistence
    from forecaster.registry import Registry, register_artifact_kind

    register_artifact_kind(DayAgo.KIND, DayAgo)
    c = Ctx(ctx.settings.model_copy(update={"models_dir": tmp_path / "models"}), ctx.options, ctx.r)
    seed_deployment(c, "simdep", mean_rpm=80)
    idx = c.store.frame("simdep").index  # a week of minutes up to now
    minute_of_day = (idx.hour * 60 + idx.minute).to_numpy()
    days = 200.0 + 150.0 * np.sin(2 * np.pi * minute_of_day / 1440)
    c.store.upsert_frame("simdep", pd.DataFrame({"requests": days}, index=idx))
    assert not str(forecast.step(c, "simdep").doc["version"]).startswith("simdep/")  # nothing trained yet
    reg = Registry(tmp_path / "models")

    # Night 1: the challenger is exact and persistence is not: promoted.
    first = retrain.step(c, "simdep", baselines=[Persistence()], make_challenger=DayAgo)
    assert first.maes["lstm"] == 0.0 < first.maes["persistence"]
    assert first.promoted and reg.champion("simdep") == first.version
    row = c.state.audit_log("simdep", kind="retrain")[0]
    assert row["decision"] == f"challenger {first.version} promoted" and "beats" in row["reason"]
    # The worker's cached model was dropped: the next forecast serves the new champion.
    doc = forecast.step(c, "simdep").doc
    assert doc["version"] == f"simdep/{first.version}" and doc["model"] == "day_ago"

    # Night 2: the last 36 hours are flat, so persistence is exact: the challenger is kept out.
    flat = days.copy()
    flat[-36 * 60:] = 200.0
    c.store.upsert_frame("simdep", pd.DataFrame({"requests": flat}, index=idx))
    second = retrain.step(c, "simdep", baselines=[Persistence()], make_challenger=DayAgo)
    assert second.maes["persistence"] == 0.0 < second.maes["lstm"] == second.maes["lstm_champion"]
    assert not second.promoted
    assert reg.versions("simdep") == [first.version, second.version]
    assert reg.champion("simdep") == first.version
    row = c.state.audit_log("simdep", kind="retrain")[0]
    assert row["decision"] == f"challenger {second.version} kept" and "does not beat persistence" in row["reason"]
    assert forecast.step(c, "simdep").doc["version"] == f"simdep/{first.version}"


def test_retrain_on_too_little_history_says_so_and_keeps_the_champion(ctx, tmp_path):
    from forecaster.registry import ArtifactError, Registry

    c = Ctx(ctx.settings.model_copy(update={"models_dir": tmp_path / "models"}), ctx.options, ctx.r)
    idx = pd.date_range(pd.Timestamp.now().floor("min") - pd.Timedelta(hours=6), periods=300, freq="min")
    c.store.upsert_frame("simdep", pd.DataFrame({"requests": 50.0}, index=idx.rename("time")))
    with pytest.raises(ArtifactError, match="simdep.*more than a day"):
        retrain.step(c, "simdep")
    assert Registry(tmp_path / "models").versions("simdep") == []


def test_signals_doc_rates_states_profiles_and_warmups():
    from warmcast.config.deployments import Deployment
    from workers.live_signals import Reading, signals_doc

    dep = Deployment(name="d", profiles={"day": {"capacity_rpm": 60, "engine_args": {"max-num-seqs": 4}},
                                         "night": {"capacity_rpm": 30, "engine_args": {"max-num-seqs": 2}}})
    a, b, c, w = "http://a:1", "http://b:1", "http://c:1", "http://w:1"
    readings = [Reading(a, 0, 2, 130), Reading(b, 0, 2, 50), Reading(c, error="connect refused"),
                Reading(w, 0, 1, 40)]
    t0 = time.time() - 30
    prev = {"ts": t0, "carry": {a: {"ts": t0, "finished": 100, "running": 2},
                                b: {"ts": t0, "finished": 50, "running": 2},
                                w: {"ts": t0, "finished": 10}}}
    doc, snap = signals_doc(dep, readings, 0.4, prev, warmed={w}, warming={w}, profiles={b: "night"},
                            source="scrape")
    by = {i["url"]: i for i in doc["instances"]}
    assert by[a]["load_rpm"] == pytest.approx(60, rel=0.05) and by[a]["state"] == "ready_busy"
    assert by[b]["state"] == "saturated" and by[b]["profile"] == "night"  # night's max-num-seqs is 2
    assert by[c]["state"] == "booting" and doc["errors"] == {c: "connect refused"}
    assert by[w]["load_rpm"] == 0.0 and by[w]["warmed"]  # our own warmups are not traffic
    assert (doc["ready"], doc["provisioned"], doc["running"], doc["requests_total"]) == (3, 4, 5, 220)
    assert doc["observed_rpm"] == pytest.approx(60, rel=0.05) and doc["p99_s"] == 0.4
    assert {u: v["finished"] for u, v in snap["carry"].items()} == {a: 130, b: 50, w: 10}  # w held while warmed
    assert doc["arrivals"]["expected"] == 4 and doc["arrivals"]["missed"] == 1  # c did not answer
    first, _ = signals_doc(dep, readings, None, None, set(), set(), None, "scrape")
    assert math.isnan(first["observed_rpm"])  # no rate without a previous reading


def test_one_fan_out_per_slot_whoever_runs_second(redis_client, key_prefix):
    """A second beat, or a fan-out redelivered after Redis lost its acknowledgement, finds the
    slot claimed and must send nothing (the chaos run saw one slot fanned out twice)."""
    slot = tick_id(5.0, now=1_700_000_003.0)
    assert claim_slot(redis_client, key_prefix, "plan", slot, 5.0, "run-1")
    assert not claim_slot(redis_client, key_prefix, "plan", slot, 5.0, "run-2")
    assert claim_slot(redis_client, key_prefix, "ingest", slot, 5.0, "run-2")  # kinds are separate
    assert claim_slot(redis_client, key_prefix, "plan", tick_id(5.0, now=1_700_000_006.0), 5.0, "run-3")
    ttl = redis_client.ttl(f"{key_prefix}:fanout-claim:plan|{slot}")
    assert 55 <= ttl <= 60  # outlives the slot (4 periods, at least a minute), then goes


def test_a_five_minute_series_is_forecast_in_its_bins_and_planned_as_its_rate(ctx):
    """A count series stored at 5 minutes: the live forecast has 6 five-minute leads (not 30 bins
    read as minutes), is scored against the bins, and the planner sees requests/min."""
    end = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("5min") - pd.Timedelta(minutes=5)
    idx = pd.date_range(end=end, periods=3 * 288, freq="5min", name="time")
    ctx.store.upsert_frame("simdep", pd.DataFrame({"requests": np.full(len(idx), 500.0)}, index=idx),
                           resolution_min=5)
    doc = forecast.step(ctx, "simdep").doc
    assert doc["step_min"] == 5 and len(doc["quantiles"]["0.5"]) == 6
    assert doc["quantiles"]["0.5"][0] == pytest.approx(500.0, rel=0.05)  # requests per 5-minute bin
    fi = forecast.stored(ctx, "simdep")[1]
    p50 = fi.values[fi.levels.index(0.5)]
    assert len(p50) == 30 and p50[0] == pytest.approx(100.0, rel=0.05) and p50[4] == p50[0]  # per minute
    origin = pd.Timestamp(doc["origin"])  # the first bin is observed: scored as a bin, not as a minute
    ctx.store.upsert_frame("simdep", pd.DataFrame({"requests": [540.0]}, index=pd.DatetimeIndex([origin], name="time")),
                           resolution_min=5)
    forecast.step(ctx, "simdep")
    err = {k.decode(): v.decode() for k, v in ctx.r.hgetall(f"{ctx.prefix}:forecast-error:simdep").items()}
    assert int(err["leads_observed"]) == 1
    assert float(err["lead1_abs_error"]) == pytest.approx(abs(540.0 - doc["mean"][0]), abs=1e-3)


def test_a_lost_policy_state_is_audited_whichever_job_reads_it_first(ctx):
    """Issue 31: after Redis came back empty the scrape's warmup fast path stored the default policy
    state before the next tick, and the tick then found a document and audited nothing (the chaos
    bench's 'Redis restarted empty' row)."""
    from workers.steps import warmup as warmup_step

    seed_steady(ctx, "simdep", 350.0)
    plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    ctx.r.delete(ctx.state.key("policy", "simdep"))      # the loss: this key alone, as an empty Redis would lack it
    assert ctx.state.get("policy", "simdep") is None
    warmup_step.step(ctx, "simdep")                        # the fast path reads it first
    plan.step(ctx, "simdep", tick="T2", run_id="task-b")
    lost = ctx.state.audit_log("simdep", kind="state")
    assert [e["decision"] for e in lost] == ["policy state lost"], lost


def test_the_forecast_step_resolves_a_model_once_and_counts_it(ctx):
    """Resolving (judging the models by backtest, then fitting) is the step's costliest part; it runs
    once a process, deployment and hour, and /metrics counts each (bench/scale.py reports them)."""
    from workers import metrics

    seed_deployment(ctx, "simdep", mean_rpm=80)
    before = metrics.MODEL_RESOLUTIONS._value.get()
    forecast.step(ctx, "simdep")
    forecast.step(ctx, "simdep")
    assert metrics.MODEL_RESOLUTIONS._value.get() - before == 1
