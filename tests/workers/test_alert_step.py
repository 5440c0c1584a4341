"""The alert step against the real Redis and a real HTTP sink, on the simulated fleet: each
tier's responses through the actuators, once per group under duplicate and reordered
deliveries, nothing applied while paused, resolution releasing the standby floor, failover."""
from __future__ import annotations

import re
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from alertsink import Sink
from warmcast.config.settings import load_settings
from workers.alerting import state as alert_state
from workers.steps import alerts
from workers.context import Ctx
from workers.options import WorkerOptions
from workers.steps import forecast as forecast_step
from workers.steps import signals as signals_step
from workers.steps import tick as tick_step

DEPLOYMENTS = """
deployments:
  - name: adep
    min_replicas: 1
    max_replicas: 4
    cold_start_min: 0.5
    profiles:
      day: {{capacity_rpm: 100, engine_args: {{max-num-seqs: 4}}}}
    alerts:
      report_url: {sink}/report
      primary_window_min: 10
      medium_window_min: 15
      failover:
        scaler: {{kind: webhook, url: "{sink}/dr-scale"}}
        redeploy_url: {sink}/redeploy
"""
T0 = datetime(2026, 1, 5, 12, 0, 0)


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.close()


@pytest.fixture
def actx(tmp_path, redis_client, key_prefix, redis_server_url, sink) -> Ctx:
    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS.format(sink=sink.url))
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    ctx = Ctx(settings, WorkerOptions(simulate=True), redis_client)
    ctx.scaler("adep").scale_to(1, "test: one instance")
    return ctx


GROUP = '{}:{deployment="adep"}'


def note(status="firing", tier="primary", starts=T0, ends=None, names=("WarmcastTTFTHigh",), alerts=(),
         group=GROUP) -> dict:
    """A note as the API's receiver makes it (``alerts``: [fingerprint, status] pairs)."""
    return {"group_key": group, "deployment": "adep", "status": status, "tier": tier,
            "alertnames": list(names), "starts_at": starts.isoformat(), "ends_at": ends and ends.isoformat(),
            "adjust": "up", "alerts": [list(a) for a in alerts]}


def responses(ctx) -> list[tuple[str, bool]]:
    return [(r["decision"], r["applied"]) for r in reversed(ctx.state.audit_log("adep", kind="alert-response"))]


def test_primary_reports_and_adjusts_once_under_duplicate_deliveries(actx, sink):
    for at in (T0, T0, T0 + timedelta(seconds=30)):  # a retry and a repeat
        alerts.step(actx, "adep", note(), now=at)
    assert responses(actx) == [("primary report", True), ("primary adjust", True)]
    [report] = sink.bodies("/report")
    assert report["tier"] == "primary" and report["alert"]["alertnames"] == ["WarmcastTTFTHigh"]
    assert "[PRIMARY] adep: WarmcastTTFTHigh" in report["text"] and report["slo"]
    assert alert_state.reports(actx.r, actx.prefix, "adep")[0]["text"] == report["text"]
    # the derived profile: max-num-seqs 4 -> 5, known to the loop, requested through the switch
    assert actx.dep("adep").profiles["day-seqs5"].engine_args["max-num-seqs"] == 5
    assert actx.state.get("profile-request", "adep")["profile"] == "day-seqs5"
    codes = [r["inputs"]["code"] for r in reversed(actx.state.audit_log("adep", kind="alert"))]
    assert codes == ["alert_opened", "alert_duplicate", "alert_waiting"]
    trail = [(r["kind"], r["decision"]) for r in reversed(actx.state.audit_log("adep")) if r["kind"].startswith("alert")]
    assert trail[:3] == [("alert", "firing primary: report, adjust"), ("alert-response", "primary report"),
                         ("alert-response", "primary adjust")]  # the decision first, then its responses


def test_the_switch_machinery_takes_the_derived_profile(actx):
    alerts.step(actx, "adep", note(), now=T0)
    out = tick_step.step(actx, "adep", tick="T1", run_id="r1")   # the tick runs the switch machine
    assert out.switch_applied and "day-seqs5" in (out.switch_reason + str(out.switch_outcome)), out


def test_escalation_starts_a_standby_the_planner_keeps_until_resolved(actx):
    alerts.step(actx, "adep", note(), now=T0)
    alerts.step(actx, "adep", note(), now=T0 + timedelta(minutes=11))  # primary did not clear it
    assert responses(actx)[2:] == [("medium standby", True), ("medium rollback", True)]
    assert actx.scaler("adep").current() == 2
    assert actx.cfg("adep").scaling.min_replicas == 2  # the planner's floor holds the standby
    # rollback: no other profile held the SLO; the pending adjustment is withdrawn instead
    rb = actx.state.audit_log("adep", kind="alert-response", limit=1)[0]
    assert "withdrawn" in rb["outcome"] and actx.state.get("profile-request", "adep") is None
    end = T0 + timedelta(minutes=12)
    alerts.step(actx, "adep", note("resolved", ends=end), now=end)
    assert actx.cfg("adep").scaling.min_replicas == 1
    ep = alert_state.episodes(actx.r, actx.prefix, "adep")[0]
    assert ep["resolved_at"] == end.isoformat() and ep["tier"] == "medium"
    alerts.step(actx, "adep", note(), now=end + timedelta(seconds=5))  # a late copy of the firing
    assert len(responses(actx)) == 4 and actx.scaler("adep").current() == 2


def test_a_premature_resolution_is_undone_and_the_standby_floor_raised_again(actx):
    """Alertmanager resolved the group while the alert fired on (Prometheus's resend was late), then
    sent firings with the old startsAt: past the late-copy window the episode reopens, its standby
    floor comes back, nothing reruns, and escalation goes on from where it was."""
    alerts.step(actx, "adep", note(), now=T0)
    alerts.step(actx, "adep", note(), now=T0 + timedelta(minutes=11))  # medium: standby, floor 2
    end = T0 + timedelta(minutes=12)
    alerts.step(actx, "adep", note("resolved", ends=end), now=end)
    assert actx.cfg("adep").scaling.min_replicas == 1
    out = alerts.step(actx, "adep", note(), now=end + timedelta(seconds=45))
    assert out.code == "alert_reopened" and [d["kind"] for d in out.responses] == ["standby-floor"]
    assert actx.cfg("adep").scaling.min_replicas == 2 and actx.scaler("adep").current() == 2
    assert len(responses(actx)) == 4  # report, adjust, standby, rollback: none twice
    later = alerts.step(actx, "adep", note(), now=T0 + timedelta(minutes=27))  # medium window passed
    assert later.code == "alert_escalated" and responses(actx)[-1] == ("severe failover", True)


def test_reordered_resolved_before_firing_runs_nothing(actx, sink):
    end = T0 + timedelta(minutes=1)
    alerts.step(actx, "adep", note("resolved", ends=end), now=end)
    alerts.step(actx, "adep", note(), now=end + timedelta(seconds=2))
    assert responses(actx) == [] and sink.posts == []


def test_paused_records_responses_as_not_applied(actx, sink):
    actx.state.set_paused("adep", True, by="test", reason="maintenance")
    alerts.step(actx, "adep", note(tier="medium"), now=T0)
    got = actx.state.audit_log("adep", kind="alert-response")
    assert [(r["decision"], r["applied"]) for r in reversed(got)] == [
        ("medium report", False), ("medium standby", False), ("medium rollback", False)]
    assert all("paused by test: maintenance" in r["outcome"] for r in got)
    assert sink.posts == [] and actx.scaler("adep").current() == 1


def test_severe_fails_over_to_the_dr_target_and_calls_redeploy(actx, sink):
    alerts.step(actx, "adep", note(tier="severe", names=("WarmcastNoInstance",)), now=T0)
    assert responses(actx) == [("severe report", True), ("severe failover", True)]
    assert actx.dep("adep").scaler.kind == "webhook"  # the loop now scales the DR target
    assert [b["replicas"] for b in sink.bodies("/dr-scale")] == [1]
    [redeploy] = sink.bodies("/redeploy")
    assert redeploy["deployment"] == "adep" and redeploy["alerts"] == ["WarmcastNoInstance"]


def test_unreachable_report_hook_is_recorded_not_raised(actx, sink):
    sink.close()
    out = alerts.step(actx, "adep", note(), now=T0)
    rep = [r for r in out.responses if r["kind"] == "report"][0]
    assert not rep["applied"] and "not delivered" in rep["outcome"] and "report kept" in rep["outcome"]
    assert alert_state.reports(actx.r, actx.prefix, "adep")  # kept for the API all the same


@pytest.mark.parametrize("alerts_key, said", [
    ({"report_url": "ftp://x"}, "alerts.report_url: Value error, 'ftp://x' must be an http(s):// URL"),
    ({"failover": {"scaler": {"kind": "webhook"}}}, "alerts.failover.scaler: Value error, webhook scaler needs url"),
    ({"standby": 0}, "alerts.standby"),
    ({"primary_window": 3}, "alerts.primary_window: Extra inputs are not permitted"),
])
def test_bad_alerts_key_is_a_clear_error_naming_it(alerts_key, said):
    from warmcast.config.deployments import parse_deployments
    from warmcast.errors import InputError

    with pytest.raises(InputError, match="deployment x: .*" + said.replace("(", r"\(").replace(")", r"\)")):
        parse_deployments({"deployments": [{"name": "x", "profiles": {"day": {"capacity_rpm": 1}},
                                            "alerts": alerts_key}]})


def test_a_restarted_worker_does_not_repeat_a_response(actx, sink):
    alerts.step(actx, "adep", note(), now=T0)
    fresh = Ctx(actx.settings, WorkerOptions(simulate=True), actx.r)  # another process: state only in Redis
    alerts.step(fresh, "adep", note(), now=T0 + timedelta(seconds=20))
    assert responses(actx) == [("primary report", True), ("primary adjust", True)] and len(sink.posts) == 1


def test_episodes_are_keyed_by_group_and_redeliveries_told_by_fingerprints(actx, sink):
    one = [("a1", "firing")]
    alerts.step(actx, "adep", note(alerts=one), now=T0)
    again = alerts.step(actx, "adep", note(alerts=one), now=T0 + timedelta(minutes=3))  # a repeat, nothing new
    assert again.code == "alert_duplicate" and "re-delivery" in again.reason and again.responses == []
    joined = alerts.step(actx, "adep", note(alerts=one + [("b2", "firing")]), now=T0 + timedelta(minutes=4))
    assert joined.code == "alert_waiting" and "new alert(s) in the group (fingerprint b2)" in joined.reason
    other = '{}:{deployment="adep",zone="b"}'  # another route's group: its own episode, same fingerprint
    assert alerts.step(actx, "adep", note(alerts=one, group=other), now=T0 + timedelta(minutes=5)).code == \
        "alert_opened"
    eps = {e["group_key"]: e for e in alert_state.episodes(actx.r, actx.prefix, "adep")}
    assert eps[GROUP]["fingerprints"] == ["a1", "b2"] and eps[other]["fingerprints"] == ["a1"]
    assert eps[GROUP]["last_alerts"] == [{"fingerprint": "a1", "status": "firing"},
                                         {"fingerprint": "b2", "status": "firing"}]
    assert [d for d, _ in responses(actx)] == ["primary report", "primary adjust"] * 2  # once per group
    assert len(sink.bodies("/report")) == 2


def test_the_escalation_check_escalates_an_open_episode_without_a_repeat(actx):
    """Alertmanager sends the group once (no repeat): the periodic check escalates it when the
    window passes, once per tier, whatever checks or late repeats follow."""
    one = [("a1", "firing")]
    alerts.step(actx, "adep", note(alerts=one), now=T0)  # the only notification
    assert alerts.check(actx, "adep", now=T0 + timedelta(minutes=9)) == []  # the window has not passed
    [out] = alerts.check(actx, "adep", now=T0 + timedelta(minutes=10, seconds=5))
    assert out.code == "alert_escalated" and "did not clear WarmcastTTFTHigh within 10.0 min" in out.reason
    assert [(d["kind"], d["applied"]) for d in out.responses] == [("standby", True), ("rollback", True)]
    assert actx.scaler("adep").current() == 2 and actx.cfg("adep").scaling.min_replicas == 2
    entry = actx.state.audit_log("adep", kind="alert", limit=1)[0]
    assert entry["inputs"]["via"] == "escalation check" and entry["decision"] == "firing medium: standby, rollback"
    # another check, another worker's check and Alertmanager's late repeat find the tier handled
    fresh = Ctx(actx.settings, WorkerOptions(simulate=True), actx.r)
    assert alerts.check(actx, "adep", now=T0 + timedelta(minutes=10, seconds=35)) == []
    assert alerts.check(fresh, "adep", now=T0 + timedelta(minutes=11)) == []
    late = alerts.step(actx, "adep", note(alerts=one), now=T0 + timedelta(minutes=11))
    assert late.code == "alert_duplicate" and late.responses == []
    [top] = alerts.check(fresh, "adep", now=T0 + timedelta(minutes=25, seconds=10))
    assert top.code == "alert_escalated" and [d["kind"] for d in top.responses] == ["failover"]
    assert [d for d, _ in responses(actx)] == ["primary report", "primary adjust", "medium standby",
                                               "medium rollback", "severe failover"]
    assert alerts.check(actx, "adep", now=T0 + timedelta(hours=2)) == []  # severe: nothing above it
    end = T0 + timedelta(hours=2)
    alerts.step(actx, "adep", note("resolved", ends=end, alerts=[("a1", "resolved")]), now=end)
    assert alerts.check(actx, "adep", now=end + timedelta(hours=1)) == [] and len(responses(actx)) == 5


def _load(ctx, start: datetime, minutes: int, zero: datetime) -> dict[str, float]:
    """Store ``minutes`` of load from ``start`` as ingest does (requests rising by one a minute from
    60 at ``zero``, with tokens, context lengths and coverage); returns the requests by minute."""
    idx = pd.date_range(start, periods=minutes, freq="min", name="time")
    req = 60.0 + (idx - pd.Timestamp(zero)).total_seconds().to_numpy() / 60
    frame = pd.DataFrame({"requests": req, "input_tokens": req * 500, "output_tokens": req * 90,
                          "ctx_mean": 510.0, "ctx_p95": 930.0, "coverage": 1.0}, index=idx)
    ctx.store.upsert_frame("adep", frame)
    return {t.strftime("%Y-%m-%d %H:%M:%S"): float(v) for t, v in zip(idx, req)}


def _seed_audit(ctx, now: datetime) -> list[str]:
    """Planning ticks every minute from 65 minutes before ``now`` (as the plan step audits them: what
    each read and the replicas its forecast and its load asked for), a switch decision half an hour
    ago and a warmup two hours ago, in time order; returns the ticks where the forecast was low."""
    rows, below = [(now - timedelta(hours=2), "warmup", "start low", "queue 9 > 4: warm the cold instance")], []
    for k in range(65, 0, -1):
        t = now - timedelta(minutes=k)
        fc, need = (1, 2) if k in (12, 11, 10) else (2, 2)
        if fc < need and k <= 60:
            below.append(t.strftime("%Y-%m-%d %H:%M:%S"))
        up = k == 20  # the one tick that changed the count
        rows.append((t, "scale", "up 1->2" if up else f"hold {need}->{need}",
                     "forecast peak needs 2 replicas" if up else "within the band", {
            "observed_rpm": 60.0 + 60 - k, "queue_depth": float(max(0, 15 - k)), "p99_s": 0.3 + (0.5 if k <= 15 else 0),
            "ready": 2, "provisioned": 2, "forecast_model": "seasonal-naive", "forecast_origin": t.strftime("%Y-%m-%d %H:%M:%S"),
            "forecast_replicas": fc, "reactive_replicas": need, "raw": need, "tick": t.isoformat()}))
    rows.append((now - timedelta(minutes=30), "switch", "hold day->day", "night window opens at 22:00: holding day", {}))
    for t, kind, decision, reason, *inputs in sorted(rows, key=lambda r: r[0]):
        ctx.state.audit("adep", kind, decision, reason, True, "", inputs[0] if inputs else {}, ts=pd.Timestamp(t))
    return below


def test_the_report_holds_the_last_hour_forecast_vs_actual_decisions_profile_and_instances(actx, sink):
    """The report's content, from real data seeded in Redis for the hour before the alert: every stored
    signal per minute, the planning ticks' signals, the previous forecast scored against what came,
    the newest forecast's observed bins, the hour's decisions with reasons, profile and instances."""
    now = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("min").to_pydatetime()
    zero = now - timedelta(minutes=62)
    actual = _load(actx, zero, 52, zero)                               # up to 10 minutes before now
    prev = forecast_step.step(actx, "adep").doc                        # the forecast made 10 minutes ago
    actual.update(_load(actx, now - timedelta(minutes=10), 10, zero))  # what came
    forecast_step.step(actx, "adep")                                   # scores the one before; from now on
    actual.update(_load(actx, now, 2, zero))                           # two minutes of the newest one pass
    signals_step.step(actx, "adep")
    at = now + timedelta(minutes=2)
    below = _seed_audit(actx, at)
    alerts.step(actx, "adep", note(alerts=[("a1", "firing")]), now=at)
    [rep] = sink.bodies("/report")
    assert rep["alert"]["alerts"] == [{"fingerprint": "a1", "status": "firing"}] and rep["profile"] == "day"
    assert rep["instances"] and all(i["state"] and i["id"] for i in rep["instances"])
    hour = rep["last_hour"]
    assert hour["from"] == (at - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S") and hour["resolution_min"] == 1
    assert [m["time"] for m in hour["minutes"]] == sorted(t for t in actual if t >= hour["from"])
    assert len(hour["minutes"]) == 60 and all(m["requests"] == actual[m["time"]] for m in hour["minutes"])
    assert {"input_tokens", "output_tokens", "ctx_mean", "ctx_p95", "coverage"} <= set(hour["minutes"][0])
    ticks = hour["planning_ticks"]
    assert len(ticks) == 60 and ticks[0]["ts"] == hour["from"] and ticks[-1]["p99_s"] == pytest.approx(0.8)
    fva = rep["forecast_vs_actual"]
    score = fva["previous_score"]
    p50 = np.asarray(prev["quantiles"]["0.5"])
    seen = [actual[(pd.Timestamp(prev["origin"]) + pd.Timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M:%S")]
            for i in range(score["leads_observed"])]
    assert score["origin"] == prev["origin"] and score["leads_observed"] == 10
    assert score["mae"] == pytest.approx(float(np.mean(np.abs(p50[:len(seen)] - seen))), abs=1e-3)
    cur = fva["current"]
    assert cur["origin"] > prev["origin"] and len(cur["passed"]) == 2 and len(cur["next"]) == 5
    assert [p["actual"] for p in cur["passed"]] == [actual[p["time"]] for p in cur["passed"]]
    assert fva["ticks_forecast_below_load"] == below and len(below) == 3 and fva["ticks_judged"] == 60
    assert "not every past forecast" in fva["compared"] and prev["origin"] in fva["compared"]
    kinds = [(d["kind"], d["reason"]) for d in rep["recent_decisions"]]
    assert ("switch", "night window opens at 22:00: holding day") in kinds
    assert not any(k == "warmup" for k, _ in kinds)  # two hours old: not in the last hour
    assert ("scale", "forecast peak needs 2 replicas") in kinds and ("scale", "within the band") not in kinds
    assert kinds[0][0] == "alert" and "alert_opened" in kinds[0][1]  # newest first: this decision
    text = rep["text"]
    print(text)  # shown with -s
    for part in ("last hour (", "60 planning tick(s)", "forecast vs actual: warmcast keeps the newest forecast",
                 f"previous forecast ({prev['origin']}): MAE", "fewer replicas than the load needed: 3 of 60",
                 "switch hold day->day: night window opens at 22:00", "profile: day (switch steady)"):
        assert part in text, (part, text)
    assert len(re.findall(r"^  \d\d:\d0 ", text, re.M)) >= 6  # the hour in 10-minute rows


def test_forecast_only_mode_records_each_tier_as_not_applied_through_the_worker(actx, sink):
    """dry_run: the notification and the escalation check decide each tier's responses and record
    them as not applied, with why; nothing is posted, requested or scaled, and nothing replays once
    the deployment leaves forecast-only mode."""
    s = actx.settings
    dry = Ctx(load_settings(redis_url=s.redis_url, key_prefix=s.key_prefix, deployments_file=s.deployments_file,
                            state_dir=s.state_dir, dry_run=True), WorkerOptions(simulate=True), actx.r)
    out = alerts.step(dry, "adep", note(alerts=[("a1", "firing")]), now=T0)
    assert out.code == "alert_opened" and "not applied: forecast-only mode (dry_run)" in out.reason
    assert [(d["kind"], d["applied"]) for d in out.responses] == [("report", False), ("adjust", False)]
    assert all("not applied: forecast-only mode (dry_run)" in d["outcome"] for d in out.responses)
    [up] = alerts.check(dry, "adep", now=T0 + timedelta(minutes=10))  # escalation, still forecast-only
    assert [(d["kind"], d["applied"]) for d in up.responses] == [("standby", False), ("rollback", False)]
    assert responses(actx) == [("primary report", False), ("primary adjust", False), ("medium standby", False),
                               ("medium rollback", False)]
    assert all(not r["applied"] for r in actx.state.audit_log("adep", kind="alert"))
    assert sink.posts == [] and alert_state.reports(actx.r, actx.prefix, "adep") == []
    assert actx.state.get("profile-request", "adep") is None and "day-seqs5" not in actx.dep("adep").profiles
    assert actx.scaler("adep").current() == 1 and actx.cfg("adep").scaling.min_replicas == 1
    again = alerts.step(actx, "adep", note(alerts=[("a1", "firing"), ("b2", "firing")]),
                        now=T0 + timedelta(minutes=11))  # live again: what was decided does not replay
    assert again.responses == [] and len(responses(actx)) == 4 and sink.posts == []
