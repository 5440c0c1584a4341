"""The simulated fleet behind ``warmcast run --simulate`` and the loop benches has the simulator's
physics (issue 42): warmup requests take serving capacity by the simulator's rule, each profile
serves its own capacity, and the P99 is read from a latency curve (the default one without a
calibration), not a constant 0.8 s plus the wait.  Real Redis; wall-clock times are passed in."""
from __future__ import annotations

import pandas as pd
import pytest

from workers.simfleet import SimFleet

T0 = 1_800_000_000.0 - (1_800_000_000.0 % 60)   # a minute boundary


def fleet(redis_client, key_prefix, rpm: float, replicas: int = 2, **kw) -> SimFleet:
    f = SimFleet(redis_client, key_prefix, "simdep", 100.0, 1.0, "day",
                 capacities={"day": 100.0, "night": 60.0}, **kw)
    minutes = pd.date_range(pd.Timestamp(T0 - 3600, unit="s"), periods=180, freq="min")
    f.load_traffic(pd.Series(rpm, index=minutes))
    f.reset(replicas, now=T0 - 1)
    return f


def test_a_warmup_on_a_ready_instance_takes_serving_capacity(redis_client, key_prefix):
    calm = fleet(redis_client, key_prefix + ":a", rpm=190.0)           # 2 x 100 serve 190: no queue
    assert calm.signals(now=T0 + 59)["queue_depth"] == pytest.approx(0.0)
    warmed = fleet(redis_client, key_prefix + ":b", rpm=190.0)
    assert warmed.warm(["sim-1"], requests=40, duration_s=60.0, now=T0) == 1
    # the minute's 200 req/min of capacity less 40 warmup requests serve 190 arrivals: 30 wait at its end
    assert warmed.signals(now=T0 + 59.999)["queue_depth"] == pytest.approx(30.0, abs=1.0)


def test_a_warmup_sent_to_an_instance_that_boots_past_its_deadline_costs_nothing(redis_client, key_prefix):
    f = fleet(redis_client, key_prefix, rpm=190.0)
    f.scale_to(3, now=T0)                                                # sim-3 boots for a minute
    assert f.warm(["sim-3"], requests=500, duration_s=30.0, now=T0) == 0  # ready only after the deadline
    assert "sim-3" not in [i["id"] for i in f.signals(now=T0 + 61)["instances"] if i["warmed"]]
    assert f.signals(now=T0 + 119.999)["queue_depth"] == pytest.approx(0.0)   # 3 x 100 serve 190


def test_a_warmup_sent_to_a_booting_instance_is_charged_in_the_minute_it_becomes_ready(redis_client, key_prefix):
    f = fleet(redis_client, key_prefix, rpm=190.0)
    f.scale_to(3, now=T0)
    assert f.warm(["sim-3"], requests=400, duration_s=300.0, now=T0) == 1
    assert f.signals(now=T0 + 59.999)["queue_depth"] == pytest.approx(0.0)    # not charged while it boots
    # the next minute: 300 of capacity less 400 warmup requests serve nothing; 190 arrivals wait
    assert f.signals(now=T0 + 119.999)["queue_depth"] == pytest.approx(190.0, abs=1.0)


def test_each_profile_serves_its_own_capacity(redis_client, key_prefix):
    f = fleet(redis_client, key_prefix, rpm=150.0)
    f.set_replicas({"day": 0, "night": 2}, active="night", now=T0 - 3600)   # 2 x 60 = 120 for 150 arrivals
    q = f.signals(now=T0 + 59.999)["queue_depth"]
    assert q == pytest.approx(30.0, abs=1.0)


def test_the_p99_comes_from_the_latency_curve_per_profile(redis_client, key_prefix):
    f = fleet(redis_client, key_prefix, rpm=100.0)                       # half of 2 x 100
    sig = f.signals(now=T0 + 30)
    assert sig["p99_s"] == pytest.approx(0.33, abs=0.01)                 # the default curve: 1.1 x 300 ms at 50%
    assert set(sig["p99_by_profile"]) == {"day"}
    f.set_replicas({"day": 1, "night": 1}, now=T0 - 3600)               # round robin: 50 req/min each
    mixed = f.signals(now=T0 + 31)
    # night's replica serves 60 req/min: 50 is 83% of it, slower than day's 50% of 100
    assert mixed["p99_by_profile"]["night"] > mixed["p99_by_profile"]["day"]
    assert mixed["p99_s"] >= mixed["p99_by_profile"]["day"]


def test_a_calibrated_curve_replaces_the_default_and_an_idle_minute_reads_no_p99(redis_client, key_prefix):
    from warmup.sim.latency import LatencyCurve

    slow = LatencyCurve(((0.1, 900.0), (5.0, 910.0)), 5.0, 1000.0, "a test's calibration", "day")
    f = fleet(redis_client, key_prefix, rpm=100.0, curves={"day": slow})
    assert f.signals(now=T0 + 30)["p99_s"] == pytest.approx(0.9, abs=0.05)
    quiet = fleet(redis_client, key_prefix + ":q", rpm=0.0)
    assert quiet.signals(now=T0 + 30)["p99_s"] is None                  # nothing served: nothing measured


def test_its_arrivals_are_the_instances_readings_counted_by_the_live_scrapes_code(ctx, redis_client):
    """``run --simulate`` reads its arrivals as a live scrape does (issue 42): each ready instance shows
    vLLM's counters, the signals step counts them between rounds, and the tick reads that count (a
    minute counted to its last round scaled to the minute).  Through a backlog, a launch joining and
    an instance removed, every whole minute counts exactly its traffic."""
    from warmup.sim.meter import SCRAPE_EVERY_S
    from workers.steps.signals import count_rounds
    from workers.steps.tick_inputs import last_minute_load

    f = SimFleet(redis_client, ctx.prefix, "simdep", 100.0, 1.0, "day")
    rpm = [250.0, 310.0, 120.0, 400.0]
    f.load_traffic(pd.Series(rpm, index=pd.date_range(pd.Timestamp(T0, unit="s"), periods=4, freq="min")))
    f.reset(2, now=T0)                          # 2 x 100 req/min: a backlog grows in the first minutes
    rounds = 0
    for k in range(int(4 * 60 / SCRAPE_EVERY_S) + 1):
        now = T0 + k * SCRAPE_EVERY_S
        if k == 6:
            f.scale_to(4, now=now)              # two launches, ready a minute later
        if k == 18:
            f.scale_to(3, now=now)              # one removed, with requests waiting
        doc = f.signals(now=now)
        assert "observed_minute" not in doc     # no shortcut past the counting
        count_rounds(ctx, "simdep", doc["rounds"])
        rounds += 1
    counted = {int(m): float(v) for m, v in redis_client.hgetall(f"{ctx.prefix}:arrivals:simdep").items()}
    minute = int(T0 // 60)
    assert [counted[minute + j] for j in range(4)] == pytest.approx(rpm)
    load, source = last_minute_load(ctx, "simdep", pd.Timestamp(T0 + 240.5, unit="s", tz="UTC").to_pydatetime(),
                                    float("nan"), None, "simulated")
    assert load == pytest.approx(rpm[-1]) and source == "arrivals counted for the last whole minute"
