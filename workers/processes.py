"""The loop's processes on one machine (``warmcast run``): a Celery worker, beat and the API as
children in this process's group, so they end with it on Ctrl-C, SIGTERM, SIGHUP, a closed stdout
pipe, and (Linux) even when it is killed outright; the status lines it prints while they run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from warmcast.runtime import end_with_parent
from warmcast.text import clip

ROOT = Path(__file__).resolve().parents[1]  # the checkout, where the children start
Say = Callable[[str], bool]   # print a line; False once nobody reads the output any more


def _celery_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "workers.app:celery_app", *args]


def worker_cmd(concurrency: int = 4, queue: str = "warmcast", name: str = "warmcast") -> list[str]:
    # Threads, not prefork: the loop is I/O-bound, and one process keeps one Prometheus registry.
    return _celery_cmd("worker", "--pool", "threads", "-c", str(concurrency), "-Q", queue,
                       "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{name}@%h")


def beat_cmd(state_dir: Path) -> list[str]:
    return _celery_cmd("beat", "-s", str(state_dir / "celerybeat-schedule"))


def child_env(settings: Any, url: str, simulate: bool, metrics_port: int, config: Path | None) -> dict[str, str]:
    """The children's environment: the same Redis, key prefix, state and models as this process."""
    env = {**os.environ, "WARMCAST_REDIS_URL": url, "WARMCAST_KEY_PREFIX": settings.key_prefix,
           "WARMCAST_STATE_DIR": str(settings.state_dir), "WARMCAST_WORKERS_SIMULATE": "1" if simulate else "0",
           "WARMCAST_MODELS_DIR": str(settings.models_dir),
           "WARMCAST_WORKERS_METRICS_PORT": str(metrics_port), "PYTHONPATH": str(ROOT)}
    if settings.deployments_file:
        env["WARMCAST_DEPLOYMENTS_FILE"] = str(settings.deployments_file)
    if config:
        env["WARMCAST_CONFIG"] = str(config)
    return env


def api_cmd(port: int) -> list[str]:
    return [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app", "--host", "127.0.0.1",
            "--port", str(port)]


class Children:
    """Child processes in this process's group, so a Ctrl-C at the terminal reaches them too;
    stopped together (SIGTERM, then SIGKILL), and each one ends if this process dies however it
    dies (Linux's parent-death signal), so none is left holding a port.  A child that dies while
    the loop runs is started again after a backoff (:meth:`restart_dead`): a beat killed by a
    stall, a worker killed by the kernel, must not stop the loop (issue 41)."""

    BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
    STEADY_S = 300.0   # a child that ran this long has its backoff reset

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.specs: dict[str, tuple[list[str], dict[str, str], Path]] = {}
        self.restarts: dict[str, int] = {}
        self._started: dict[str, float] = {}
        self._due: dict[str, float] = {}

    def start(self, name: str, cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        with open(log, "a") as out:
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 preexec_fn=end_with_parent)
        self.procs[name], self.specs[name] = p, (cmd, env, log)
        self._started[name] = time.monotonic()
        return p

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def restart_dead(self, say: Callable[[str], object], now: float | None = None) -> list[str]:
        """Start again each child that exited once its backoff has passed; say what happened.
        The names started again."""
        now = time.monotonic() if now is None else now
        again = []
        for name in self.dead():
            if name not in self._due:
                if now - self._started[name] >= self.STEADY_S:
                    self.restarts[name] = 0
                n = self.restarts.get(name, 0)
                wait = self.BACKOFF_S[min(n, len(self.BACKOFF_S) - 1)]
                self._due[name] = now + wait
                say(f"  {name} exited (code {self.procs[name].returncode}); starting it again in {wait:g} s "
                    f"(restart {n + 1}; see {self.specs[name][2]})")
            elif now >= self._due[name]:
                del self._due[name]
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self.start(name, *self.specs[name])
                say(f"  {name} started again (pid {self.procs[name].pid})")
                again.append(name)
        return again

    def stop(self, grace_s: float = 15.0) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + grace_s
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


class StopRequest:
    """SIGINT, SIGTERM and SIGHUP ask `warmcast run` to stop its children and exit (the default
    actions would end this process alone); a second one while stopping is ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.by: str | None = None
        self._old = {s: signal.signal(s, self._note) for s in self.SIGNALS}

    def _note(self, signum: int, frame) -> None:  # noqa: ARG002
        self.by = self.by or signal.Signals(signum).name

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def kick_off(settings, options) -> None:
    """Run the minute jobs once now, so a new user sees a forecast and a decision in seconds, not a minute."""
    from workers.app import make_celery

    app = make_celery(settings, options)
    for kind, delay in (("scrape", 0), ("forecast", 2), ("plan", 10)):
        app.send_task("warmcast.fanout", kwargs={"kind": kind}, countdown=delay, expires=120, queue=options.queue)


def status_line(ctx, dep: str) -> str:
    fc = ctx.state.get_forecast(dep)
    plan = ctx.state.get("plan", dep)
    sig = ctx.state.get("signals", dep) or {}
    parts = [f"[{dep}]"]
    if sig:
        parts.append(f"load {sig.get('observed_rpm') or 0:,.0f} req/min, queue {sig.get('queue_depth') or 0:,.1f}, "
                     f"ready {sig.get('ready')}/{sig.get('provisioned')}")
    if fc:
        p90 = fc["quantiles"].get("0.9") or list(fc["quantiles"].values())[-1]
        parts.append(f"forecast ({fc['model']}) P90 peak {max(p90):,.0f} req/min in the next 30 min")
    if plan:
        parts.append(f"plan: {plan.get('action')} {plan.get('current')}->{plan.get('desired')} "
                     f"({clip(plan.get('reason') or '', 90)})")
    if len(parts) == 1:
        parts.append("waiting for the first scrape / forecast / plan ...")
    return "  ".join(parts)


def safe_status_line(ctx, dep: str) -> str:
    try:
        return status_line(ctx, dep)
    except Exception as err:  # noqa: BLE001 - a status line must never stop the loop
        return f"[{dep}] status unavailable: {err}"


def stop_local_instances(ctx: Any, say: Say) -> None:
    """vLLM processes the local backend started outlive workers on purpose; `warmcast run` stops them."""
    if ctx.simulate:
        return
    for d in ctx.deployments():
        if d.scaler.kind != "local":
            continue
        try:
            ctx.scaler(d.name).inner.close()
            say(f"  stopped the local vLLM instances of {d.name}")
        except Exception as err:  # noqa: BLE001 - report and go on stopping the rest
            say(f"  could not stop the local instances of {d.name}: {err}")


def supervise(kids: Children, stop: StopRequest, ctx: Any, deps: list[str], duration: float,
              status_every: float, say: Say, warn: Callable[[str], None]) -> None:
    """Print status lines until a stop signal, the duration or a closed stdout, starting a dead
    child again after its backoff (and saying so); then stop every child."""
    t0 = time.monotonic()
    next_status = t0 + min(status_every, 15)
    try:
        while stop.by is None:
            time.sleep(0.5)
            kids.restart_dead(warn)
            if duration and time.monotonic() - t0 >= duration:
                break
            if time.monotonic() >= next_status:
                next_status += status_every
                if not all(say(safe_status_line(ctx, d)) for d in deps):
                    break  # whoever read our output is gone
    finally:
        say("stopping worker, beat and API ...")
        kids.stop()
        stop_local_instances(ctx, say)
        say("stopped.")
        stop.restore()
