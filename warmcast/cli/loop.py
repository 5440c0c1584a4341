"""``warmcast run`` (everything on one machine), ``warmcast worker`` and ``warmcast beat``.

``warmcast run``'s worker, beat and API are its children in its process group: they end with it
on Ctrl-C, SIGTERM, SIGHUP, a closed stdout pipe, and (Linux) even when it is killed outright.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

ROOT = Path(__file__).resolve().parents[2]  # the checkout, where the children start
ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


def _celery_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "workers.app:celery_app", *args]


def worker_cmd(concurrency: int = 4, queue: str = "warmcast", name: str = "warmcast") -> list[str]:
    # Threads, not prefork: the loop is I/O-bound, and one process keeps one Prometheus registry.
    return _celery_cmd("worker", "--pool", "threads", "-c", str(concurrency), "-Q", queue,
                       "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{name}@%h")


def beat_cmd(state_dir: Path) -> list[str]:
    return _celery_cmd("beat", "-s", str(state_dir / "celerybeat-schedule"))


def _api_available() -> bool:
    try:
        import api.app  # noqa: F401

        return hasattr(sys.modules["api.app"], "create_app")
    except Exception:  # noqa: BLE001 - any import problem means: run without the API, and say so
        return False


class Children:
    """Child processes in this process's group, so a Ctrl-C at the terminal reaches them too;
    stopped together (SIGTERM, then SIGKILL), and each one ends if this process dies however it
    dies (Linux's parent-death signal), so none is left holding a port."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        with open(log, "a") as out:
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 preexec_fn=_end_with_parent)
        self.procs[name] = p
        return p

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]

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


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: the signal handlers of `warmcast run` still stop the children


_PRCTL = _libc_prctl()  # looked up here: the child between fork and exec must not import or load


def _end_with_parent() -> None:
    """In the child before exec: receive SIGTERM when the parent dies (PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


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


def say(text: str) -> bool:
    """Print a line; False once stdout is a closed pipe (`... | tee log` ended), and from then
    on output goes nowhere instead of raising at every write and at exit."""
    try:
        typer.echo(text)
        sys.stdout.flush()
        return True
    except (BrokenPipeError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False


def _status_line(ctx, dep: str) -> str:
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
                     f"({(plan.get('reason') or '')[:90]})")
    if len(parts) == 1:
        parts.append("waiting for the first scrape / forecast / plan ...")
    return "  ".join(parts)


def run(
    simulate: bool = typer.Option(False, "--simulate", help="Drive a simulated fleet replaying synthetic traffic "
                                  "instead of real instances."),
    api: bool = typer.Option(True, "--api/--no-api", help="Also serve the API (api.app:create_app)."),
    api_port: int = typer.Option(8000, "--api-port", min=1, max=65535),
    metrics_port: int = typer.Option(9108, "--metrics-port", min=0, max=65535,
                                     help="Worker's Prometheus metrics port (0: off)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=64),
    mean_rpm: Optional[float] = typer.Option(None, "--mean-rpm", help="--simulate: mean requests/min "
                                             "(default twice one instance's capacity)."),
    duration: float = typer.Option(0, "--duration", min=0, help="Stop after this many seconds (0: until Ctrl-C)."),
    status_every: float = typer.Option(30, "--status-every", min=1, help="Print a status line this often (s)."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Run the whole loop on this machine: Redis (embedded if no URL), a worker, beat and the API."""
    from warmcast.runtime import redis_url
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import load_options

    settings = load_settings(config)
    url = redis_url(settings)  # starts the embedded redis-server when no URL is set; stopped at exit
    if simulate:
        from workers.simulate import simulation_settings

        settings = simulation_settings(settings)
    options = load_options(simulate=simulate)
    ctx = Ctx(settings, options)
    deps = [d.name for d in ctx.deployments()]
    log_dir = Path(settings.state_dir) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    typer.echo(f"warmcast run: Redis {url}, key prefix {settings.key_prefix!r}, deployments {deps}"
               + ("  [forecast-only: nothing is applied]" if settings.dry_run else ""))
    if simulate:
        _seed_simulation(ctx, deps, mean_rpm)
    env = {**os.environ, "WARMCAST_REDIS_URL": url, "WARMCAST_KEY_PREFIX": settings.key_prefix,
           "WARMCAST_STATE_DIR": str(settings.state_dir), "WARMCAST_WORKERS_SIMULATE": "1" if simulate else "0",
           "WARMCAST_MODELS_DIR": str(settings.models_dir),
           "WARMCAST_WORKERS_METRICS_PORT": str(metrics_port), "PYTHONPATH": str(ROOT)}
    if settings.deployments_file:
        env["WARMCAST_DEPLOYMENTS_FILE"] = str(settings.deployments_file)
    if config:
        env["WARMCAST_CONFIG"] = str(config)
    stop = StopRequest()
    kids = Children()
    kids.start("worker", worker_cmd(concurrency, options.queue), env, log_dir / "worker.log")
    kids.start("beat", beat_cmd(Path(settings.state_dir)), env, log_dir / "beat.log")
    if api and _api_available():
        kids.start("api", [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app", "--host",
                           "127.0.0.1", "--port", str(api_port)], env, log_dir / "api.log")
        say(f"  API and dashboard: http://127.0.0.1:{api_port}/")
    elif api:
        say("  API not started: api.app:create_app is not available in this install")
    _kick_off(settings, options)
    if metrics_port:
        say(f"  loop metrics: http://127.0.0.1:{metrics_port}/metrics")
    say(f"  logs: {log_dir}/{{worker,beat,api}}.log   (Ctrl-C stops everything)")
    _supervise(kids, stop, ctx, deps, duration, status_every)


def _seed_simulation(ctx, deps: list[str], mean_rpm: Optional[float]) -> None:
    from workers.simulate import seed_deployment

    typer.echo(f"  simulated: its history, state and models are kept apart (key prefix {ctx.prefix!r}, "
               f"{ctx.settings.models_dir}); what you ingested under the plain prefix is left as it was")
    for d in deps:
        info = seed_deployment(ctx, d, mean_rpm=mean_rpm)
        typer.echo(f"  {d}: simulated fleet of {info['replicas']} instance(s), {info['history_minutes']:,} "
                   f"minutes of synthetic history (mean {info['mean_rpm']:,.0f} req/min), live traffic replayed")


def _kick_off(settings, options) -> None:
    """Run the minute jobs once now, so a new user sees a forecast and a decision in seconds, not a minute."""
    from workers.app import make_celery

    app = make_celery(settings, options)
    for kind, delay in (("scrape", 0), ("forecast", 2), ("plan", 10)):
        app.send_task("warmcast.fanout", kwargs={"kind": kind}, countdown=delay, expires=120, queue=options.queue)


def _supervise(kids: Children, stop: StopRequest, ctx, deps: list[str], duration: float,
               status_every: float) -> None:
    """Print status lines until a stop signal, a dead child, the duration or a closed stdout;
    then stop every child."""
    t0 = time.monotonic()
    next_status = t0 + min(status_every, 15)
    try:
        while stop.by is None:
            time.sleep(0.5)
            dead = kids.dead()
            if dead:
                typer.secho(f"stopping: {', '.join(dead)} exited (see its log)", fg=typer.colors.RED, err=True)
                break
            if duration and time.monotonic() - t0 >= duration:
                break
            if time.monotonic() >= next_status:
                next_status += status_every
                if not all(say(_safe_status_line(ctx, d)) for d in deps):
                    break  # whoever read our output is gone
    finally:
        say("stopping worker, beat and API ...")
        kids.stop()
        _stop_local_instances(ctx)
        say("stopped.")
        stop.restore()


def _safe_status_line(ctx, dep: str) -> str:
    try:
        return _status_line(ctx, dep)
    except Exception as err:  # noqa: BLE001 - a status line must never stop the loop
        return f"[{dep}] status unavailable: {err}"


def _stop_local_instances(ctx) -> None:
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


def worker(concurrency: int = typer.Option(4, "--concurrency", min=1, max=64),
           config: Optional[Path] = ConfigOpt) -> None:
    """Run one Celery worker of the loop (same as celery -A workers.app worker ...)."""
    if config:
        os.environ["WARMCAST_CONFIG"] = str(config)
    _check_config(config)
    os.execv(sys.executable, worker_cmd(concurrency))


def beat(config: Optional[Path] = ConfigOpt) -> None:
    """Run the beat scheduler (RedBeat: a second one waits as a hot standby)."""
    if config:
        os.environ["WARMCAST_CONFIG"] = str(config)
    settings = _check_config(config)
    os.execv(sys.executable, beat_cmd(Path(settings.state_dir)))


def _check_config(config: Optional[Path]) -> Any:
    """The settings, with the deployments file read as the loop will read it: a worker or beat must not
    start on a file it cannot use (issue 31: both started, then every task failed).  The error names the
    problem (exit 2) and nothing is started."""
    from warmcast.runtime import load_fleet
    from warmcast.config.settings import load_settings

    settings = load_settings(config)
    load_fleet(settings)
    return settings


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.command()(run)
    app.command()(worker)
    app.command()(beat)
