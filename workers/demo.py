"""The quickstart job, end to end on the embedded defaults:
generate -> ingest -> summarise -> forecast -> plan (forecast-only mode)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from warmcast.config.settings import Settings


def run_demo(settings: Settings, days: int, deployment: str, workdir: Path,
             echo: Callable[[str], None] = print) -> None:
    from warmcast.generate import WorkloadSpec, write_request_log
    from warmcast.ingest import aggregate_file
    from warmcast.runtime import open_state, open_store, redis_url
    from warmcast.summary import summary_text

    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "requests.csv"
    rows = write_request_log(log, WorkloadSpec(days=days))
    echo(f"1/4 generated {rows:,} synthetic requests over {days} days -> {log}")
    store = open_store(settings)
    frame, report = aggregate_file([log], progress=True)
    store.upsert_frame(deployment, frame)
    echo(f"2/4 ingested into Redis at {redis_url(settings)}\n{report.summary()}")
    history = store.frame(deployment)
    echo("3/4 summary\n" + summary_text(history, deployment, 24 * 60))
    echo("4/4 replaying the last day: forecast and plan every 2 hours, every minute while a profile switch runs "
         "(forecast-only mode, nothing applied)")
    echo(replay_plans(settings, deployment, history, open_state(settings)))
    echo(f"\nnext: .venv/bin/warmcast backtest fleet --log {log} --capacity-rpm 300 --cold-start-min 15 "
         f"--test-start {history.index[-1].normalize() - pd.Timedelta(days=1):%Y-%m-%d} --out {workdir / 'fleet'}")


def replay_plans(settings: Settings, deployment: str, history: pd.DataFrame, state, step_h: int = 2) -> str:
    """Forecast and decide at origins over the last day, as the live loop would have; each
    decision goes to the audit log with its reason. Each row shows the profile the decision
    planned with (``active>target`` while a switch is under way) and one replica's capacity then.

    Every ``step_h`` hours, and at the minute a scheduled switch's pre-warm is due; while a switch
    runs, every minute (the live loop's tick), a row at each phase, so a switch shows the minutes it
    takes, not one phase per 2-hour decision (issue 46: the day switch looked 8 hours long)."""
    from warmcast.config.deployments import demo_deployment
    from warmup.core.adapters import core_config
    from warmup.core.switching import IN_SWITCH

    replay = _Replay(demo_deployment(deployment), core_config(demo_deployment(deployment), dry_run=True),
                     settings, deployment, history, state)
    end = history.index[-1] + pd.Timedelta(minutes=1)
    origins = pd.date_range(end - pd.Timedelta(days=1), end, freq=f"{step_h}h", inclusive="left")
    for origin in sorted(set(origins) | set(_prewarm_minutes(replay.cfg, end - pd.Timedelta(days=1), end))):
        if replay.until is not None and origin < replay.until:
            continue   # the minute-by-minute switch below already decided it
        replay.step(origin, fresh=True)
        t = origin
        while replay.policy.switch.phase in IN_SWITCH and t < end - pd.Timedelta(minutes=1):
            t += pd.Timedelta(minutes=1)
            replay.step(t, fresh=False)
        replay.until = t
    return "\n".join(replay.lines)


def _prewarm_minutes(cfg, start: pd.Timestamp, end: pd.Timestamp) -> list[pd.Timestamp]:
    """The minutes a scheduled switch's pre-warm is due: the schedule asks for another profile one
    pre-warm lead later than it did a minute before."""
    from warmup.core.switching import scheduled_profile

    lead = pd.Timedelta(minutes=cfg.switch.prewarm_min)
    minutes = pd.date_range(start, end, freq="min", inclusive="left")
    asked = [scheduled_profile(cfg.switch, (t + lead).to_pydatetime())[0] for t in minutes]
    return [t for t, a, b in zip(minutes[1:], asked, asked[1:]) if a != b]


class _Replay:
    """The demo's replayed loop: a forecast (refreshed each quarter hour), the decision core's state,
    and a fleet of profile pools that follows each decision (launches ready one cold start later)."""

    def __init__(self, dep, cfg, settings: Settings, name: str, history: pd.DataFrame, state) -> None:
        from forecaster.registry import Registry

        self.dep, self.cfg, self.name, self.history, self.state = dep, cfg, name, history, state
        self.registry = Registry(settings.models_dir)
        self.policy, self.fc, self.pools = None, None, {}
        self.until: pd.Timestamp | None = None
        self.lines = [f"{'time (UTC)':17} {'profile':>11} {'rpm/replica':>11} {'now/min':>8} {'P90 +15m':>9} "
                      f"{'model':>14} {'replicas':>9}  reason"]

    def step(self, t: pd.Timestamp, fresh: bool) -> None:
        """Decide at minute ``t``; a row (and its audit entry) where ``fresh`` or the switch's phase moved."""
        from forecaster.live import forecast_deployment
        from warmup.core import TickInput
        from warmup.core.adapters import forecast_input
        from warmup.core.engine import decide, planning_capacity
        from warmup.core.switching import scheduled_profile
        from warmup.sim.switches import profile_targets

        past = self.history.loc[: t - pd.Timedelta(minutes=1)]
        if self.fc is None or fresh or t - self.fc.origin >= pd.Timedelta(minutes=15):
            self.fc = forecast_deployment(past, self.registry, self.name)
        now_rpm = float(past["requests"].iloc[-1])
        scheduled, _ = scheduled_profile(self.cfg.switch, t.to_pydatetime())
        active = self.policy.switch.active_profile if self.policy is not None else ""
        self._fleet(t, active or scheduled, now_rpm)
        before = self.policy.switch.phase if self.policy is not None else None
        out = decide(self.cfg, TickInput(now=t.to_pydatetime(), instances=self._instances(now_rpm),
                                         observed_rpm=now_rpm, forecast=forecast_input(self.fc),
                                         active_profile=active or scheduled), self.policy)
        self.policy = out.state
        profile = self.policy.switch.active_profile or scheduled
        want, _, _ = profile_targets(out.switch.replicas, out.scale.desired, profile, self.pools, False)
        for p, n in want.items():  # the fleet follows: launches boot one cold start, removals go at once
            self.pools.setdefault(p, _pool()).resize(n, self._minute(t), int(self.dep.cold_start_min))
        if fresh or out.state.switch.phase != before:
            self._row(t, out, profile, planning_capacity(self.cfg, self.policy, profile), now_rpm)

    def _fleet(self, t: pd.Timestamp, profile: str, now_rpm: float) -> None:
        """Boots finished by ``t``; the first time, a fleet sized for the load on the live profile."""
        from warmup.core import replicas_for

        if not self.pools:
            n = max(self.dep.min_replicas, replicas_for(now_rpm, self.dep.profiles[profile].capacity_rpm, 1.0))
            self.pools[profile] = _pool(n)
        for pool in self.pools.values():
            pool.advance(self._minute(t))

    def _instances(self, now_rpm: float) -> tuple:
        from warmup.core import Instance, InstanceState

        ready = max(1, sum(p.ready for p in self.pools.values()))
        out = []
        for name, pool in self.pools.items():
            out += [Instance(f"{name}-r{i}", InstanceState.READY_BUSY, name, now_rpm / ready)
                    for i in range(pool.ready)]
            out += [Instance(f"{name}-b{i}", InstanceState.BOOTING, name) for i in range(len(pool.booting))]
        return tuple(out)

    def _minute(self, t: pd.Timestamp) -> int:
        return int((t - self.history.index[0]) / pd.Timedelta(minutes=1))

    def _row(self, t: pd.Timestamp, out, profile: str, capacity: float, now_rpm: float) -> None:
        target = self.policy.switch.target_profile
        shown = f"{profile}>{target}" if target and target != profile else profile
        self.state.audit(self.name, "scale", f"{out.scale.current}->{out.scale.desired}", str(out.scale.reason),
                         applied=False, inputs={"observed_rpm": now_rpm, "model": self.fc.model}, ts=t)
        p90 = self.fc.quantile(0.9)
        ahead = p90[min(len(p90) - 1, 14 + int((t - self.fc.origin) / pd.Timedelta(minutes=1)))]  # t + 15 min
        self.lines.append(f"{t:%Y-%m-%d %H:%M} {shown:>11} {capacity:11.0f} {now_rpm:8.0f} "
                          f"{ahead:9.0f} {self.fc.model:>14} {out.scale.current:>4}->"
                          f"{out.scale.desired:<4}  {out.scale.reason}")


def _pool(ready: int = 0):
    from warmup.sim.fleet import Pool

    return Pool(ready=ready)
