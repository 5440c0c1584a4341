"""The live context-mix trigger's pure rules: histogram share above a length, sustained crossings."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from warmup.core.mix_trigger import MixTriggerConfig, count_above, decide_mix

T0 = datetime(2024, 1, 1, 20, 0, tzinfo=timezone.utc)
CFG = MixTriggerConfig(profile="night", long_tokens=4096, share=0.3, sustain_min=10)
# vLLM's prompt-token buckets (1-2-5 series) as cumulative counts: 10 <= 1000, 16 <= 2000, 20 <= 5000, 25 total
BUCKETS = ((1.0, 0), (1000.0, 10), (2000.0, 16), (5000.0, 20), (10000.0, 24), (math.inf, 25))


def _series(values, start=T0):
    return [(start + timedelta(minutes=i), v) for i, v in enumerate(values)]


def test_count_above_interpolates_inside_a_bucket_like_histogram_quantile():
    long_, total = count_above(BUCKETS, 4096)
    # 4 observations in (2000, 5000]: 2096/3000 of them below 4096
    assert total == 25 and long_ == pytest.approx(25 - (16 + 4 * 2096 / 3000))
    assert count_above(BUCKETS, 5000) == (5.0, 25.0)        # on a bound: exact
    assert count_above(BUCKETS, 20000) == (1.0, 25.0)       # beyond the last finite bound: the +Inf bucket
    assert count_above((), 4096) == (0.0, 0.0)
    assert count_above(((1.0, 0.0), (math.inf, 0.0)), 4096) == (0.0, 0.0)


def test_a_sustained_crossing_asks_for_the_profile():
    ask = decide_mix(CFG, _series([0.1] * 5 + [0.5] * 10), T0 + timedelta(minutes=15))
    assert ask.profile == "night" and "for 10 min" in ask.why and ask.share_now == 0.5


def test_a_short_spike_does_not_switch():
    ask = decide_mix(CFG, _series([0.1] * 5 + [0.5] * 9), T0 + timedelta(minutes=14))
    assert ask.profile == "" and "the clock decides" in ask.why


def test_a_short_dip_keeps_the_ask_and_a_sustained_one_ends_it():
    held = [0.5] * 12
    assert decide_mix(CFG, _series(held + [0.1] * 5), T0 + timedelta(minutes=17)).profile == "night"
    assert decide_mix(CFG, _series(held + [0.1] * 10), T0 + timedelta(minutes=22)).profile == ""


def test_a_missing_minute_breaks_a_run():
    values = [0.5] * 5 + [math.nan] + [0.5] * 5
    assert decide_mix(CFG, _series(values), T0 + timedelta(minutes=11)).profile == ""
    gap = _series([0.5] * 5) + _series([0.5] * 5, T0 + timedelta(minutes=7))  # minutes 5 and 6 absent
    assert decide_mix(CFG, gap, T0 + timedelta(minutes=12)).profile == ""


def test_no_readings_and_future_minutes_leave_the_clock_in_charge():
    assert "no live long-context share" in decide_mix(CFG, [], T0).why
    assert decide_mix(CFG, _series([0.9] * 20), T0).profile == ""  # all at or after now


def test_bad_config_is_refused():
    with pytest.raises(ValueError):
        MixTriggerConfig(profile="night", share=0)
