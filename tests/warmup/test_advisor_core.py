"""The profile advisor's pure decisions: windows, block sizes, sequences, swap, schedule."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from warmup.planning.advisor import MIN_RATIO, MinuteStat, WindowStats, find_windows
from warmup.planning.advisor_args import InstanceSpec, nearest_accepted, predicted_length, profile_args, propose, seed_block

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=30)


def _days(days: int, ctx_at, step_min: int = 1) -> tuple[MinuteStat, ...]:
    out = []
    for m in range(0, days * 1440, step_min):
        at = T0 + timedelta(minutes=m)
        c = ctx_at(m % 1440)
        out.append(MinuteStat(at, 10.0, c, c * 0.7, c * 2.5))
    return tuple(out)


def _night(a: int, b: int, long_: float = 8000.0, short: float = 500.0):
    return lambda mod: long_ if (mod >= a or mod < b) else short


def test_two_windows_found_at_the_true_shift_times():
    w = find_windows(_days(3, _night(20 * 60 + 10, 7 * 60 + 35)), NOW)
    short, long_ = w.windows
    assert abs(long_.start_min - (20 * 60 + 10)) <= 5 and abs(long_.end_min - (7 * 60 + 35)) <= 5
    assert (short.start_min, short.end_min) == (long_.end_min, long_.start_min)
    assert short.ctx_mean == pytest.approx(500, rel=0.05) and long_.ctx_mean == pytest.approx(8000, rel=0.05)
    assert "two windows" in w.reasons[0]


def test_windows_are_in_the_schedule_time_zone():
    berlin = ZoneInfo("Europe/Berlin")  # UTC+1 in January: a 19:00 UTC shift is 20:00 there
    w = find_windows(_days(3, _night(19 * 60, 6 * 60)), NOW, berlin)
    assert (w.windows[1].start_min, w.windows[1].end_min) == (20 * 60, 7 * 60)
    assert w.tz_name == "Europe/Berlin"


def test_a_small_shift_is_not_worth_a_switch():
    w = find_windows(_days(3, _night(20 * 60, 7 * 60, long_=600.0, short=500.0)), NOW)
    assert len(w.windows) == 1 and f"{MIN_RATIO:.1f}x" in w.reasons[0] and "one window" in w.reasons[0]


def test_an_hour_of_log_gives_one_window_and_says_why():
    stats = tuple(s for s in _days(1, _night(20 * 60, 7 * 60)) if s.at.hour == 3)
    w = find_windows(stats, NOW)
    assert len(w.windows) == 1 and w.windows[0].label == "all day"
    assert "cover only 1.0 h" in w.reasons[0]


def test_no_token_counts_is_said_not_guessed():
    stats = tuple(MinuteStat(T0 + timedelta(minutes=m), 5.0, math.nan) for m in range(1440))
    w = find_windows(stats, NOW)
    assert not w.has_tokens and w.windows == () and "no prompt-token counts" in w.reasons[0]


def test_minutes_at_or_after_now_are_not_read():
    stats = _days(2, _night(20 * 60, 7 * 60))
    w = find_windows(stats, T0 + timedelta(hours=5))  # only the first five (long) hours are before now
    assert len(w.windows) == 1 and w.windows[0].ctx_mean == pytest.approx(8000)


@pytest.mark.parametrize("length,block", [(500, 16), (2000, 16), (4000, 24), (7000, 32), (8200, 32),
                                          (16000, 64), (100000, 64)])
def test_seed_table(length, block):
    assert seed_block(length)[0] == block


def test_block_size_maps_to_the_nearest_accepted_and_says_so():
    assert nearest_accepted(24, (16, 32, 64)) == (32, "24 is not accepted; nearest accepted 32")
    assert nearest_accepted(16, (16, 32, 64))[0] == 16
    assert nearest_accepted(16, tuple(range(32, 1025, 32)))[0] == 32  # the CPU backend: multiples of 32


def test_smoothing_trusts_history_more_above_8k():
    w = WindowStats(0, 0, 1.0, ctx_mean=10000, ctx_p50=8000, ctx_p95=20000, ctx_current=12000)
    assert predicted_length(w)[0] == pytest.approx(0.3 * 12000 + 0.7 * 10000)
    w = WindowStats(0, 0, 1.0, ctx_mean=1000, ctx_p50=800, ctx_p95=2000, ctx_current=2000)
    assert predicted_length(w)[0] == pytest.approx(0.7 * 2000 + 0.3 * 1000)


def test_long_contexts_get_fewer_sequences_larger_batches_and_swap_by_the_seed_formula():
    spec = InstanceSpec(memory_gb=80, weights_gb=100, accepted_block_sizes=(16, 32, 64), has_swap_space=True)
    short = profile_args(WindowStats(0, 0, 1, 500, 400, 1500, 500), InstanceSpec())
    long_ = profile_args(WindowStats(0, 0, 1, 8000, 6000, 20000, 8000), InstanceSpec())
    assert short.engine_args["max-num-seqs"] > long_.engine_args["max-num-seqs"] >= 1
    assert long_.engine_args["max-num-batched-tokens"] >= 20000
    assert "swap-space" not in short.engine_args and "no --swap-space" in short.reasons[-1]
    heavy = profile_args(WindowStats(0, 0, 1, 500, 400, 1500, 500), spec)
    assert heavy.swap_gb == 30 and heavy.engine_args["swap-space"] == 30  # 0.3 x 100 GB > 20 GB
    assert "WARNING: the weights do not fit" in heavy.reasons[1]


def test_schedule_prewarms_one_cold_start_ahead_of_each_switch():
    w = find_windows(_days(3, _night(20 * 60, 7 * 60 + 30)), NOW)
    p = propose(w.windows, InstanceSpec(), 30.0, "measured launches")
    assert [x.name for x in p.profiles] == ["day", "night"] and p.default_profile == "day"
    assert p.schedule == (("night", 20 * 60, 7 * 60 + 30),)
    assert dict(p.prewarm) == {"night": 19 * 60 + 30, "day": 7 * 60}
    assert "measured launches" in p.reasons[0]
