"""``warmcast run`` (everything on one machine), ``warmcast worker`` and ``warmcast beat``: the
options and what is printed; the processes themselves are ``workers/processes.py``."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer

ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


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
    from warmcast.config.settings import load_settings
    from warmcast.runtime import redis_url
    from workers import processes
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
    env = processes.child_env(settings, url, simulate, metrics_port, config)
    stop = processes.StopRequest()
    kids = processes.Children()
    kids.start("worker", processes.worker_cmd(concurrency, options.queue), env, log_dir / "worker.log")
    kids.start("beat", processes.beat_cmd(Path(settings.state_dir)), env, log_dir / "beat.log")
    if api:
        kids.start("api", processes.api_cmd(api_port), env, log_dir / "api.log")
        say(f"  API and dashboard: http://127.0.0.1:{api_port}/")
    processes.kick_off(settings, options)
    if metrics_port:
        say(f"  loop metrics: http://127.0.0.1:{metrics_port}/metrics")
    say(f"  logs: {log_dir}/{{worker,beat,api}}.log   (Ctrl-C stops everything)")
    processes.supervise(kids, stop, ctx, deps, duration, status_every, say,
                        lambda text: typer.secho(text, fg=typer.colors.RED, err=True))


def _seed_simulation(ctx, deps: list[str], mean_rpm: Optional[float]) -> None:
    from workers.simulate import seed_deployment

    typer.echo(f"  simulated: its history, state and models are kept apart (key prefix {ctx.prefix!r}, "
               f"{ctx.settings.models_dir}); what you ingested under the plain prefix is left as it was")
    for d in deps:
        info = seed_deployment(ctx, d, mean_rpm=mean_rpm)
        typer.echo(f"  {d}: simulated fleet of {info['replicas']} instance(s), {info['history_minutes']:,} "
                   f"minutes of synthetic history (mean {info['mean_rpm']:,.0f} req/min), live traffic replayed")


def worker(concurrency: int = typer.Option(4, "--concurrency", min=1, max=64),
           config: Optional[Path] = ConfigOpt) -> None:
    """Run one Celery worker of the loop (same as celery -A workers.app worker ...)."""
    if config:
        os.environ["WARMCAST_CONFIG"] = str(config)
    _check_config(config)
    from workers.processes import worker_cmd

    os.execv(sys.executable, worker_cmd(concurrency))


def beat(config: Optional[Path] = ConfigOpt) -> None:
    """Run the beat scheduler (RedBeat: a second one waits as a hot standby)."""
    if config:
        os.environ["WARMCAST_CONFIG"] = str(config)
    settings = _check_config(config)
    from workers.processes import beat_cmd

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
