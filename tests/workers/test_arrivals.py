"""Arrival counting (warmup.actuators.arrivals): each way the fleet changes under the counters."""
from __future__ import annotations

import pytest

from warmup.actuators.arrivals import InstanceReading as R
from warmup.actuators.arrivals import by_minute, count

A, B = "http://a:1", "http://b:1"
T = 600.0  # minute 10


def test_steady_counts_finished_plus_in_flight_change():
    c = count({A: R(T, 100, 2, 0)}, {A: R(T + 30, 130, 3, 1)})
    assert c.arrivals == 30 + (4 - 2) and c.coverage == 1.0 and c.spans[0].reason == "counted"


def test_saturation_counts_queued_arrivals_not_capacity():
    # a saturated server finishes 10 while 25 more queue: 35 arrived, not the 10 it could serve
    c = count({A: R(T, 50, 4, 5)}, {A: R(T + 60, 60, 4, 30)})
    assert c.arrivals == 35


def test_counter_reset_counts_from_zero_like_increase():
    c = count({A: R(T, 500, 2, 0)}, {A: R(T + 60, 7, 1, 0)})
    assert c.arrivals == 8 and c.spans[0].reason == "counter reset"


def test_instance_leaving_is_not_a_drop():
    c = count({A: R(T, 10), B: R(T, 20)}, {A: R(T + 60, 25)})
    assert c.arrivals == 15 and c.coverage == 1.0 and set(c.carry) == {A}


def test_instance_joining_is_not_a_spike_and_counts_from_its_start():
    c = count({A: R(T, 10)}, {A: R(T + 60, 25), B: R(T + 60, 4, 1, 0, warmup_done=3)})
    # B: 4 finished + 1 running since it started, 3 of them our warmup
    assert c.arrivals == 15 + 2 and {s.instance: s.reason for s in c.spans}[B] == "joined"


def test_failed_scrape_is_incomplete_and_the_gap_is_counted_when_back():
    first = count({A: R(T, 10), B: R(T, 100)}, {A: R(T + 60, 20), B: None})
    assert first.arrivals == 10 and first.coverage == 0.5 and first.uncounted == {B: "scrape failed"}
    assert first.carry[B] == R(T, 100) and first.held_since == T
    back = count(first.carry, {A: R(T + 120, 30), B: R(T + 120, 160)})
    assert back.arrivals == 10 + 60 and back.coverage == 1.0
    # B's 60 over two minutes are spread over both, not a spike in the second
    per = by_minute(back.spans, default_start=T + 60)
    assert per == {10: pytest.approx(30), 11: pytest.approx(10 + 30)}


def test_warmup_sends_are_subtracted_and_held_while_warming():
    prev = {A: R(T, 10, 0, 0, warmup_done=5)}
    held = count(prev, {A: R(T + 30, 40, 2, 0, warmup_done=5)}, warming={A})
    assert held.spans == () and held.coverage == 1.0 and held.carry[A] == prev[A]
    done = count(held.carry, {A: R(T + 60, 50, 0, 0, warmup_done=25)})
    assert done.arrivals == 40 - 20  # 40 finished, 20 of them warmcast's own


def test_first_round_only_sets_the_baseline():
    c = count(None, {A: R(T, 1000, 3, 0)})
    assert c.arrivals == 0 and c.coverage == 0.0 and c.carry[A].finished == 1000


def test_by_minute_spreads_a_span_over_minutes_and_keeps_the_total():
    c = count({A: R(590.0, 0)}, {A: R(680.0, 90)})
    per = by_minute(c.spans, default_start=590.0)
    assert per == {9: pytest.approx(10), 10: pytest.approx(60), 11: pytest.approx(20)}


def test_ingest_stores_counts_with_coverage_and_the_forecaster_skips_incomplete_minutes(
        tmp_path, redis_client, key_prefix, redis_server_url):
    import math
    import time as _time

    from forecaster.base import target_series
    from loophelpers import SIM_DEPLOYMENTS
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import ingest
    from workers.counting import record_round

    deps = tmp_path / "deployments.yaml"
    deps.write_text(SIM_DEPLOYMENTS.format(cold=0.5))
    ctx = Ctx(load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                            state_dir=tmp_path / "state"), WorkerOptions(simulate=False), redis_client)
    m = int(_time.time() // 60) - 5
    rounds = [{"by_minute": {}, "minute": m, "expected": 2, "missed": 2, "held_since": None},  # baseline only
              {"by_minute": {str(m + 1): 12.0}, "minute": m + 1, "expected": 2, "missed": 0, "held_since": None},
              {"by_minute": {str(m + 2): 5.0}, "minute": m + 2, "expected": 2, "missed": 1, "held_since": (m + 2) * 60},
              {"by_minute": {str(m + 2): 6.0, str(m + 3): 11.0}, "minute": m + 3, "expected": 2, "missed": 0,
               "held_since": None}]
    for r in rounds:
        record_round(ctx, "simdep", r)
    assert ingest.step(ctx, "simdep").minutes == 4
    frame = ctx.store.frame("simdep")
    assert math.isnan(frame["requests"].iloc[0]) and frame["coverage"].iloc[0] == 0  # not a zero
    assert list(frame["requests"].iloc[1:]) == [12.0, 11.0, 11.0]
    assert list(frame["coverage"].iloc[1:]) == [1.0, 0.5, 1.0]
    assert target_series(frame).isna().tolist() == [True, False, True, False]


def test_the_tick_scales_a_minute_its_scrape_rounds_counted_only_in_part(ctx):
    """Beat sends a slot's scrape and tick together and the tick may run first: it then finds the last
    minute counted up to its last round.  Read as it stood, that minute was a sixth short at 10 s rounds;
    the tick scales it to the minute and says so, reads a minute counted to its end as it is, and reads
    one counted for less than MIN_COUNTED_S as it stands, saying why."""
    from datetime import datetime, timezone

    from workers.counting import record_round
    from workers.steps.tick_inputs import MIN_COUNTED_S, last_minute_load

    m = 29_000_000   # an epoch minute
    now = datetime.fromtimestamp((m + 1) * 60 + 0.2, timezone.utc)   # the tick just after the boundary
    record_round(ctx, "simdep", {"by_minute": {str(m): 250.0}, "minute": m, "until": m * 60 + 50.0,
                                    "expected": 2, "missed": 0, "held_since": None})
    load, source = last_minute_load(ctx, "simdep", now, float("nan"), None, "scrape")
    assert load == pytest.approx(300.0) and "counted for 50 s of the last minute, scaled to the minute" in source
    record_round(ctx, "simdep", {"by_minute": {str(m): 45.0}, "minute": m + 1, "until": (m + 1) * 60.0,
                                    "expected": 2, "missed": 0, "held_since": None})
    load, source = last_minute_load(ctx, "simdep", now, float("nan"), None, "scrape")
    assert load == pytest.approx(295.0) and source == "arrivals counted for the last whole minute"
    short = m + 5
    record_round(ctx, "simdep", {"by_minute": {str(short): 40.0}, "minute": short,
                                    "until": short * 60 + MIN_COUNTED_S - 10.0, "expected": 2, "missed": 0,
                                    "held_since": None})
    load, source = last_minute_load(ctx, "simdep", datetime.fromtimestamp((short + 1) * 60, timezone.utc),
                                    float("nan"), None, "scrape")
    assert load == 40.0 and "counted for 10 s of the last minute (too little to scale)" in source


def test_a_minute_its_first_round_ever_fell_inside_is_scaled_from_there():
    """A loop that starts mid-minute counts that minute from its first round only (a baseline): the
    tick reads it scaled from there, not as a whole minute a third short."""
    from workers.steps.tick_inputs import counted_load

    m = 29_000_000
    load, source = counted_load(80.0, m, until=(m + 1) * 60.0, since=m * 60 + 20.0)
    assert load == pytest.approx(120.0) and "counted for 40 s of the last minute, scaled" in source
    assert counted_load(80.0, m, until=(m + 1) * 60.0, since=m * 60 - 5.0)[0] == 80.0


def test_a_scrape_round_records_the_instant_it_counted_up_to(ctx, redis_client, key_prefix):
    """The live scrape's arrivals document carries its round's instant; recording it is what lets the
    tick know how much of the last minute is counted."""
    from warmup.actuators.arrivals import Count
    from workers.live_signals import arrivals_doc
    from workers.counting import record_round

    doc = arrivals_doc(Count((), {}, 0), 1000.0, 1234.5)
    assert doc["until"] == 1234.5 and doc["minute"] == 20

    record_round(ctx, "d", doc)
    assert float(redis_client.get(f"{key_prefix}:arrivals-until:d")) == 1234.5
    assert 0 < redis_client.ttl(f"{key_prefix}:arrivals-until:d") <= 3600
