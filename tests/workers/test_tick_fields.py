"""Every field of the one tick reaches the fleet (or the audit says why not): the warm buffer from the
stored error history, wakes through a backend with sleep mode, refusals where there is none, and a
clock going backwards refused before anything is decided."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from warmcast.errors import InputError
from warmcast.config.settings import load_settings
from warmup.core.buffer import minute_key
from warmup.sim.fleet import Observation, Pool
from workers.context import Ctx
from workers.options import WorkerOptions
from workers.replay import ReplayCtx
from workers.replay_fleet import ReplayFleet
from workers.simulate import seed_deployment
from workers.steps import signals, tick

SLEEPY = """deployments:
  - name: sleepy
    cold_start_min: 10
    min_replicas: 1
    max_replicas: 10
    sleep: {wake_s: 30}
    scaler: {kind: dryrun}
    profiles:
      day: {capacity_rpm: 100}
"""


def _sleepy_ctx(tmp_path, redis_client, key_prefix, redis_server_url, simulate: bool) -> Ctx:
    deps = tmp_path / "sleepy.yaml"
    deps.write_text(SLEEPY)
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    return Ctx(settings, WorkerOptions(simulate=simulate), redis_client)


def test_a_stored_error_history_sizes_the_live_buffer(ctx):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    ctx.state.put("policy-config", "simdep", {"scaling": {"buffer_level": 0.9, "buffer_window_min": 10}})
    origin = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:00")   # a forecast of 50 req/min: 1 replica
    ctx.state.put("forecast", "simdep", {"origin": origin, "model": "test", "step_min": 1,
                                         "quantiles": {q: [50.0] * 30 for q in ("0.1", "0.5", "0.9")}})
    before = tick.step(ctx, "simdep", tick="T1", run_id="a")
    assert ctx.state.get("plan-journal", "simdep")["decision"]["buffer"] == 0, before   # no record yet
    # the forecasts made 5 minutes before each of the last 15 minutes said 100 req/min; 300 came
    now = datetime.now(timezone.utc)
    last = minute_key(now) - 1
    ctx.r.hset(f"{ctx.prefix}:fc-lead:simdep", mapping={
        str(m): json.dumps([[0.1, 0.5, 0.9], [80.0, 90.0, 100.0]]) for m in range(last - 14, last + 1)})
    import pandas as pd

    idx = pd.DatetimeIndex([pd.Timestamp(m * 60, unit="s") for m in range(last - 14, last + 1)], name="time")
    ctx.store.upsert_frame("simdep", pd.DataFrame({"requests": [300.0] * 15}, index=idx))
    tick.step(ctx, "simdep", tick="T2", run_id="b")
    d = ctx.state.get("plan-journal", "simdep")["decision"]
    assert d["buffer"] == 2 and "warm buffer 2" in d["reason"]["text"], d   # +200 req/min at 100 per replica
    # the record read holds the window and the adaptation's catch-up minutes (buffer.ADAPT_CATCH_UP);
    # the buffer is sized from the window's last 10
    assert ctx.state.get("plan-journal", "simdep")["inputs"]["recent_errors"] == 15
    assert "of the last 10 lead-5 forecast errors" in d["reason"]["text"], d


def test_a_wake_reaches_a_backend_with_sleep_mode(tmp_path, redis_client, key_prefix, redis_server_url):
    probe = _sleepy_ctx(tmp_path, redis_client, key_prefix, redis_server_url, simulate=True)
    fleet = ReplayFleet(100.0)
    rctx = ReplayCtx(probe.settings, fleet, redis_client, probe.cfg("sleepy"))
    try:
        now = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        fleet.track({"": Pool(ready=1)}, 0)   # its instances' ids, as the simulator's loop has them follow
        fleet.observe(Observation(0, 250.0, 0.0, 1, 0, 0.0, asleep=1), now)
        signals.step(rctx, "sleepy")
        out = tick.step(rctx, "sleepy", tick="T1", run_id="a", now=now)
        assert fleet.woken == ("s0",) and "wake 1" in fleet.calls and out.desired == 3, (fleet.calls, out)
        row = rctx.state.audit_log("sleepy", kind="sleep")[0]
        assert row["applied"] and "woke 1 of 1" in row["outcome"], row
    finally:
        rctx.drop()


def test_a_wake_is_refused_with_the_reason_on_a_backend_without_sleep(tmp_path, redis_client, key_prefix,
                                                                       redis_server_url):
    c = _sleepy_ctx(tmp_path, redis_client, key_prefix, redis_server_url, simulate=False)
    now = time.time()
    inst = lambda iid, state: {"id": iid, "state": state, "profile": "day", "url": None}  # noqa: E731
    c.state.put("signals", "sleepy", {"ts": now, "source": "test", "observed_rpm": 250.0,
                                      "observed_minute": int(now // 60) - 1, "queue_depth": 0.0, "p99_s": None,
                                      "instances": [inst("a", "ready_busy"), inst("b", "asleep")],
                                      "ready": 1, "provisioned": 1})
    tick.step(c, "sleepy", tick="T1", run_id="a")
    d = c.state.get("plan-journal", "sleepy")["decision"]
    assert list(d["wake"]) == ["b"]
    row = c.state.audit_log("sleepy", kind="sleep")[0]
    assert not row["applied"] and row["outcome"] == "not applied (wake 1): the dryrun scaler has no sleep mode", row
    assert c.scaler("sleepy").current() == 3   # the scale-up itself went through


def test_a_clock_going_backwards_is_refused_before_anything_is_decided(ctx):
    seed_deployment(ctx, "simdep", mean_rpm=80)
    now = datetime.now(timezone.utc)
    tick.step(ctx, "simdep", tick="T1", run_id="a", now=now)
    journal = ctx.state.get("plan-journal", "simdep")
    with pytest.raises(InputError, match="clock went backwards"):
        tick.step(ctx, "simdep", tick="T2", run_id="b", now=now - timedelta(minutes=5))
    assert ctx.state.get("plan-journal", "simdep") == journal


SIM_SLEEPY = SLEEPY.replace("    scaler: {kind: dryrun}\n", "")


def test_the_simulated_fleet_keeps_an_asleep_tier_and_wakes_it_through_the_tick(tmp_path, redis_client, key_prefix,
                                                                                redis_server_url):
    deps = tmp_path / "sim.yaml"
    deps.write_text(SIM_SLEEPY)
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    c = Ctx(settings, WorkerOptions(simulate=True), redis_client)
    seed_deployment(c, "sleepy", mean_rpm=80)
    sim = c.sim("sleepy")
    import pandas as pd

    now_min = int(time.time() // 60)
    sim.load_traffic(pd.Series(250.0, index=pd.to_datetime([(now_min + k) * 60 for k in range(-2, 3)], unit="s")))
    sim.reset(1)
    assert sim.set_asleep(2) == 2 and sim.current() == 1     # asleep instances are not provisioned
    states = sorted(i["state"] for i in sim.signals()["instances"])
    assert states.count("asleep") == 2
    out = tick.step(c, "sleepy", tick="T1", run_id="a")       # 250 req/min needs 3: wakes 2, launches none
    d = c.state.get("plan-journal", "sleepy")["decision"]
    assert out.desired == 3 and len(d["wake"]) == 2, (out, d)
    states = sorted(i["state"] for i in sim.signals()["instances"])
    assert states.count("waking") == 2 and "asleep" not in states and sim.current() == 3, states
    row = c.state.audit_log("sleepy", kind="sleep")[0]
    assert row["applied"] and "woke 2 of 2" in row["outcome"], row
