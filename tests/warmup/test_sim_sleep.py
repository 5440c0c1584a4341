"""The asleep tier and the warm buffer in the fleet simulator; late episodes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from wu_helpers import synthetic_minutes
from warmup.sim import FleetBacktestConfig, from_series, make_split
from warmup.sim.backtest import compute_forecasts, run_policy
from warmup.sim.fleet import FleetParams, Observation, late_episodes, summarise
from warmup.sim.loop import run_online
from warmup.sim.sleep import SleepPool


@dataclass
class Scripted:
    """Wants ``want[t]`` instances and keeps ``keep`` asleep."""

    want: list[int]
    keep: int
    name: str = "scripted"

    def decide(self, obs: Observation) -> int:
        return self.want[obs.t]

    def asleep_target(self) -> int:
        return self.keep


PARAMS = FleetParams(capacity_rpm=60.0, cold_start_min=3, wake_s=20.0, sleep_cost_share=0.5)


def burst(minutes: int = 8, at: int = 4, base: float = 60.0, high: float = 180.0) -> np.ndarray:
    """Per-minute arrivals in six 10 s steps: ``base`` req/min, ``high`` from minute ``at`` on."""
    per = np.full(minutes, base)
    per[at:] = high
    return np.repeat(per[:, None] / 6.0, 6, axis=1)


def test_pool_fills_by_launch_then_wakes_inside_the_minute() -> None:
    arr = burst(high=120.0)
    want = [1] * 4 + [3] * 4
    run = run_online(Scripted(want, keep=2), arr, 60.0, PARAMS, initial_ready=1)
    # two launched to sleep at minute 0, asleep from minute 3 (cold start 3), woken at minute 4
    assert run.wakes == 2 and run.ready[4] == 3
    assert run.standby[0] == 2.0 and run.standby[3] == pytest.approx(1.0)   # booting in full, asleep at 0.5
    # the woken pair serves from 20 s into minute 4: the backlog is only the first 20 s's excess (20
    # requests; the fluid model reads its wait at the pre-wake rate), drained within the minute
    assert run.queue[4] == 0.0 and run.max_wait[4] == pytest.approx(20.0) and run.late[5:].sum() == 0
    row = summarise(run, arr.sum(axis=1), PARAMS)
    assert row["wakes"] == 2 and row["gpu_hours"] == pytest.approx((run.provisioned.sum() + run.standby.sum()) / 60)


def test_without_a_pool_the_burst_waits_for_a_cold_start() -> None:
    arr = burst()
    want = [1] * 4 + [3] * 4

    class NoSleep(Scripted):
        pass

    p = FleetParams(capacity_rpm=60.0, cold_start_min=3)
    run = run_online(NoSleep(want, keep=0), arr, 60.0, p, initial_ready=1)
    assert run.wakes == 0 and run.standby is None
    assert run.ready[4] == 1 and run.ready[7] == 3
    assert run.late[5:7].sum() > 100 and run.max_wait[6] > 60


def test_scale_in_puts_instances_to_sleep_before_releasing_them() -> None:
    pool = SleepPool(wake_s=20.0, boot_minutes=3)
    assert pool.absorb(removed=3, target=2) == 2 and pool.asleep == 2
    pool.fill(1, t=0)
    assert pool.asleep == 1 and pool.launches == 0
    pool.fill(3, t=5)
    assert pool.to_sleep == [8, 8] and pool.launches == 2
    pool.settle(8)
    assert pool.asleep == 3 and pool.to_sleep == []


def test_a_wake_of_a_minute_or_more_joins_the_booting() -> None:
    arr = burst(minutes=12, at=6)
    want = [1] * 6 + [3] * 6
    p = FleetParams(capacity_rpm=60.0, cold_start_min=5, wake_s=90.0)
    run = run_online(Scripted(want, keep=2), arr, 60.0, p, initial_ready=1)
    assert run.wakes == 2 and run.ready[7] == 1 and run.ready[8] == 3   # 2 minutes after the wake, not 5


def test_late_episodes_split_on_gaps() -> None:
    late = np.zeros(100)
    late[[3, 4, 5, 9, 40, 41, 90]] = 5.0
    assert late_episodes(late) == 3
    assert late_episodes(np.zeros(5)) == 0


@pytest.fixture(scope="module")
def bursty():
    s = synthetic_minutes(days=4, mean=1500.0, seed=3)
    rng = np.random.default_rng(3)
    for m in rng.choice(np.arange(1440, len(s) - 30), 12, replace=False):
        s.iloc[m:m + 6] *= 1.8
    return from_series(s, source="synthetic with bursts")


def test_predictive_with_an_asleep_buffer_wakes_on_bursts(bursty) -> None:
    cfg = FleetBacktestConfig(capacity_rpm=300.0, cold_start_min=15, test_start=pd.Timestamp("2024-01-03"),
                              forecaster="sim_seasonal_profile", wake_s=30.0)
    split = make_split(bursty, cfg.test_start)
    bundle = compute_forecasts(bursty, cfg, (0.1, 0.5, 0.9))
    knobs = {"quantile": 0.5, "buffer_level": 0.99}
    ready = run_policy("predictive", split, cfg, bundle, knobs=knobs)
    slept = run_policy("predictive", split, cfg, bundle, knobs={**knobs, "buffer_asleep": True})
    assert ready.params["buffer_level"] == 0.99 and slept.params["buffer_asleep"] is True
    assert ready.standby.sum() == 0 and slept.standby.sum() > 0
    assert slept.wakes > 0 and any(kind == "wake" for _, kind, _ in slept.events)
    assert slept.provisioned.sum() < ready.provisioned.sum()   # the buffer is held asleep, not ready


DEPLOYMENT = """
deployments:
  - name: chat
    cold_start_min: 15
    sleep: {{wake_s: {wake}, cost_share: 0.5, buffer_asleep: true}}
    profiles:
      day: {{capacity_rpm: 300}}
"""


def test_the_deployments_sleep_key_reaches_the_core(tmp_path) -> None:
    from warmcast.config.deployments import load_deployments
    from warmup.core.adapters import core_config

    p = tmp_path / "deployments.yaml"
    p.write_text(DEPLOYMENT.format(wake=20))
    sc = core_config(load_deployments(p).deployments[0]).scaling
    assert (sc.wake_s, sc.sleep_cost_share, sc.buffer_asleep) == (20.0, 0.5, True)
    no_sleep = DEPLOYMENT.replace("    sleep: {{wake_s: {wake}, cost_share: 0.5, buffer_asleep: true}}\n", "")
    p.write_text(no_sleep.format())
    assert core_config(load_deployments(p).deployments[0]).scaling.wake_s is None


def test_a_bad_sleep_key_names_the_problem(tmp_path) -> None:
    from warmcast.config.deployments import load_deployments
    from warmcast.errors import InputError

    p = tmp_path / "deployments.yaml"
    p.write_text(DEPLOYMENT.format(wake=-3))
    with pytest.raises(InputError, match="wake_s"):
        load_deployments(p)
