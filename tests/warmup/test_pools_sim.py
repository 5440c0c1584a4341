"""The pools simulator: its queue models checked by hand, and the joint policy on a synthetic overlay."""
from __future__ import annotations

import numpy as np
import pytest

from warmup.planning.pools import PoolShape, SharedLimits
from warmup.sim.pools import PoolSimConfig, always_on, replay, run_all

CFG = PoolSimConfig(hot=PoolShape(60, 1.0, 1.0, 10), cold=PoolShape(60, 1.0, 1.0, 10),
                    limits=SharedLimits(10, 80), cold_start_s=60, late_wait_s=5, deadline_min=1, drain_min=3)


def test_hot_queue_and_cold_deadline_by_hand():
    hot = np.zeros(120)
    # a burst of 12 in one second at 1 request/s: arriving at x s into the second, a request waits 11x s
    # (the fleet model's fluid FIFO), late after x = 5/11: 12 * 6/11 are late
    hot[0] = 12
    cold = np.zeros(120)
    cold[0] = 120  # one cold instance serves 60 per minute: the second 60 finish after the 1-min deadline
    run = replay(hot, cold, CFG, lambda obs: (1, 1), "fixed")
    assert run.hot_requests == 12 and run.hot_late == pytest.approx(12 * 6 / 11)
    assert run.cold_missed == pytest.approx(60, abs=1)
    assert run.hot_gpu_hours == pytest.approx((120 + 180) / 3600)  # one instance over the log and the drain


def test_hot_requests_behind_a_long_queue_are_late():
    hot = np.zeros(60)
    # second 0: a request x s in waits 19x s, late after x = 5/19 (20 * 14/19); at t=1 the queue ahead is
    # 19 s of work (all 3 late); at t=8 it is 15 s (all 4 late)
    hot[0], hot[1], hot[8] = 20, 3, 4
    run = replay(hot, np.zeros(60), CFG, lambda obs: (1, 0), "fixed")
    assert run.hot_late == pytest.approx(20 * 14 / 19 + 3 + 4) and run.cold_missed == 0


def test_instances_start_after_the_cold_start_and_are_paid_from_launch():
    cold = np.zeros(240)
    cold[60] = 60
    run = replay(np.zeros(240), cold, CFG, lambda obs: (0, 1 if obs.minute >= 1 else 0), "late start")
    # launched at t=60, ready at t=120: served within 1 s of 120 -> done 60-61 s after arrival: just late
    assert run.cold_missed == pytest.approx(60, abs=1)
    assert run.cold_gpu_hours == pytest.approx((240 + 180 - 60) / 3600)


def _overlay(seed: int = 3, minutes: int = 90):
    rng = np.random.default_rng(seed)
    t = np.arange(minutes * 60)
    hot = rng.poisson(4 + 2 * np.sin(2 * np.pi * t / 3600)).astype(float)
    bursts = (rng.random(minutes) < 0.2).repeat(60)  # batch jobs arrive in whole-minute bursts
    cold = rng.poisson(np.where(bursts, 6.0, 0.05)).astype(float)
    return hot, cold


def test_joint_keeps_limits_meets_deadline_and_saves_cold_gpu_hours():
    hot, cold = _overlay()
    cfg = PoolSimConfig(hot=PoolShape(40, 0.6, 0.8, 30), cold=PoolShape(60, 1.0, 1.0, 40),
                        limits=SharedLimits(24, 80), cold_start_s=120, deadline_min=30, drain_min=35)
    runs = {r.policy: r for r in run_all(hot, cold, cfg)}
    j, r, a = runs["joint"], runs["reactive"], runs["always-on"]
    assert j.over_limit_s == 0 and j.cold_missed == 0
    assert j.hot_late == r.hot_late and j.hot_gpu_hours == pytest.approx(r.hot_gpu_hours)  # same hot rule
    assert j.cold_gpu_hours < r.cold_gpu_hours < a.cold_gpu_hours
    assert j.minutes["cold_backlog"][-1] == 0


def test_always_on_is_sized_for_the_busiest_minute():
    hot = np.r_[np.full(60, 1.0), np.full(60, 3.0)]  # 60 then 180 requests/min
    cold = np.full(120, 0.5)
    policy = always_on(hot, cold, CFG)
    assert policy(None) == (3, 1)
