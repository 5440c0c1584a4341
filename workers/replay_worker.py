"""``warmcast replay --through-worker`` (issue 42): each replayed minute's tick runs in a real Celery
worker process, as it runs live, instead of in the replay's own process.

The driver starts one worker (``workers.processes.worker_cmd``, threads pool, one slot) under the
replay's own key prefix, reading the fleet the driver publishes each minute
(``WARMCAST_WORKERS_REPLAYED_FLEET``) and deciding with the core configuration the driver decides
with (published once, ``replay_fleet.CORE``).  Each minute it sends ``warmcast.scrape`` and then
``warmcast.plan`` with the replayed minute as the clock, waits for both, reads back what the tick set
on the fleet (``replay_fleet.take_targets``) and hands it to the simulator, which launches, wakes,
removes and serves as for any policy.  The worker is stopped and every key it wrote is deleted at the
end, as the in-process replay drops its own.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pandas as pd
from warmcast.errors import InputError
from workers.replay import ReplayCtx, ReplayPolicy
from workers.replay_fleet import CORE, publish, take_targets
from workers.serde import to_json


class WorkerTicker(ReplayPolicy):
    """The tick of each replayed minute sent to a Celery worker (``app``) and awaited; what it set on
    the published fleet is read back before the simulator applies it.  With ``forecast_step`` the
    worker's own forecast step makes the forecasts (the resolver's model, every ``forecast_every_s``)
    instead of the driver storing the backtest's.  With ``shadow`` (:mod:`workers.shadow_replay`) it
    only sends the tick, on a fleet the worker reads and does not act on."""

    def __init__(self, app: Any, *args: Any, timeout_s: float = 120.0, forecast_step: bool = False,
                 shadow: bool = False) -> None:
        super().__init__(*args)
        self.app, self.timeout_s, self.forecast_step, self.shadow = app, timeout_s, forecast_step, shadow
        self.used: list[Optional[dict[str, Any]]] = []   # with forecast_step: the forecast each tick read

    def _send(self, task: str, **kwargs: Any) -> None:
        # Results are off for the loop's tasks (task_ignore_result); these are awaited, so kept.
        self.app.send_task(task, kwargs={"deployment": self.dep, **kwargs}, queue=self.ctx.options.queue,
                           ignore_result=False).get(timeout=self.timeout_s)

    def _store_forecast(self, t: int) -> None:
        if not self.forecast_step:
            super()._store_forecast(t)

    def _run(self, now: datetime, t: int) -> None:
        if self.shadow:  # shadow mode: the tick reads the autoscaler's fleet and records, acts on nothing
            publish(self.ctx.state, self.dep, self.ctx.fleet)
            self._send("warmcast.plan", now=now.isoformat())
            return
        publish(self.ctx.state, self.dep, self.ctx.fleet, acting=True)
        due = self.forecast_step and (t * 60) % max(60, int(self.ctx.options.forecast_every_s)) == 0
        if due and t == 0:   # the first tick has a forecast to read, as a loop that ran before would
            self._send("warmcast.forecast", now=now.isoformat())
        self._send("warmcast.scrape", now=now.isoformat())   # an urgent warmup runs on the replay's clock
        if self.forecast_step:
            self.used.append(self.ctx.state.get_forecast(self.dep))
        self._send("warmcast.plan", now=now.isoformat())
        if due and t > 0:
            # beat sends the forecast and the tick in the same slot and the tick, the shorter task,
            # finishes first: it reads the forecast made the minute before (the live lag)
            self._send("warmcast.forecast", now=now.isoformat())
        take_targets(self.ctx.state, self.dep, self.ctx.fleet)


def answers(app: Any, queue: str, timeout_s: float = 2.0) -> bool:
    """Whether a worker on ``queue`` runs a task now (``warmcast.ping``; remote control is off)."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    try:
        return app.send_task("warmcast.ping", queue=queue, ignore_result=False).get(timeout=timeout_s) == "pong"
    except CeleryTimeout:
        return False


class ReplayWorker:
    """One Celery worker process for a replay's key prefix; a context manager that starts it, waits
    until it answers a ping, and stops it (its log is kept in a temporary file and named on failure)."""

    def __init__(self, ctx: Any, deployment: str, url: str, timeout_s: float = 120.0) -> None:
        self.ctx, self.deployment, self.url, self.timeout_s = ctx, deployment, url, timeout_s
        self.log = Path(tempfile.mkstemp(prefix="warmcast-replay-worker-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        s = self.ctx.settings
        env = {**os.environ, "WARMCAST_REDIS_URL": self.url, "WARMCAST_KEY_PREFIX": self.ctx.prefix,
               "WARMCAST_STATE_DIR": str(s.state_dir), "WARMCAST_MODELS_DIR": str(s.models_dir),
               "WARMCAST_WORKERS_REPLAYED_FLEET": "true", "WARMCAST_WORKERS_SIMULATE": "0",
               "WARMCAST_DRY_RUN": "true" if s.dry_run else "false",
               # the in-process replay's lease (workers.options.replay_options): the replay's prefix is
               # its own, so the lease only has to outlast a stall
               "WARMCAST_WORKERS_LEASE_S": str(self.ctx.options.lease_s)}
        if s.deployments_file:
            env["WARMCAST_DEPLOYMENTS_FILE"] = str(s.deployments_file)
        return env

    def __enter__(self) -> Any:
        from workers.app import make_celery
        from workers.processes import ROOT, worker_cmd

        self.ctx.state.put(CORE, self.deployment, to_json(self.ctx.live))
        cmd = worker_cmd(concurrency=1, queue=self.ctx.options.queue, name=f"replay-{self.ctx.prefix[-12:]}")
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env(), stdout=out, stderr=subprocess.STDOUT)
        app = make_celery(self.ctx.settings, self.ctx.options)
        deadline = time.monotonic() + self.timeout_s
        while not answers(app, self.ctx.options.queue):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise InputError(f"the replay's Celery worker did not start (exit {self.proc.poll()}); its log: "
                                 f"{self.log}\n{self.log.read_text(errors='replace')[-2000:]}")
        return app

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if exc[0] is None:
            self.log.unlink(missing_ok=True)


class WorkerDriver:
    """The ``driver`` of :func:`workers.replay.run_replay` that runs each minute's tick in a Celery
    worker process it starts on the replay's key prefix (Redis at ``url``) and stops at the end; with
    ``forecast_step`` the worker forecasts too, from the history before the replay, stored under the
    replay's prefix as ingest keeps it.  ``tickers``: the policies it made (their ``used`` forecasts)."""

    def __init__(self, url: str, forecast_step: bool = False) -> None:
        self.url, self.forecast_step = url, forecast_step
        self.tickers: list[WorkerTicker] = []

    @contextmanager
    def __call__(self, ctx: ReplayCtx, deployment: str, history: pd.DataFrame) -> Iterator[Callable[..., ReplayPolicy]]:
        if self.forecast_step and len(history):
            end = history.index[-1] + pd.Timedelta(minutes=1)
            ctx.store.upsert_frame(deployment, history[["requests"]], now_ns=end.value)
        with ReplayWorker(ctx, deployment, self.url) as app:
            yield self._make(app)

    def _make(self, app: Any) -> Callable[..., ReplayPolicy]:
        def make(*args: Any) -> ReplayPolicy:
            self.tickers.append(WorkerTicker(app, *args, forecast_step=self.forecast_step))
            return self.tickers[-1]
        return make


def used_bundle(ticker: WorkerTicker, times: list) -> Any:
    """The forecasts a replay's ticks read from the worker's forecast step, as the simulator's bundle
    (each row with its own origin), so a backtest can decide on exactly those forecasts."""
    import numpy as np

    from warmup.sim.forecasts import ForecastBundle

    docs = [d for d in ticker.used if d]
    levels = sorted({float(q) for d in docs for q in d["quantiles"]})
    horizon = max(len(v) for d in docs for v in d["quantiles"].values())
    paths = {q: np.full((len(times), horizon), np.nan) for q in levels}
    origins = list(times)
    for t, d in enumerate(ticker.used):
        if not d:
            continue
        for q in levels:
            row = d["quantiles"].get(repr(q)) or d["quantiles"].get(str(q))
            paths[q][t, :len(row)] = row
        origins[t] = pd.Timestamp(d["origin"]).to_pydatetime()
    return ForecastBundle(model=docs[-1].get("model", "") if docs else "", levels=tuple(levels), paths=paths,
                          extra={"origins": origins})
