"""``warmcast replay``: the live loop's tick over a log (``workers/replay.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from warmcast.errors import InputError
from warmcast.cli.log_options import LOG_HELP, LogReading, log_options

ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


@log_options
def replay(
    log: Path = typer.Option(..., "--log", help=LOG_HELP),
    deployment: str = typer.Option(..., "--deployment", "-d", help="Deployment name in the deployments file."),
    test_start: str = typer.Option(..., "--test-start", help="First replayed minute (UTC); the forecaster trains "
                                   "before it."),
    out: Path = typer.Option(..., "--out", help="Directory for plan_predictive.csv, decisions_predictive.csv, "
                             "report.json, fleet.png."),
    test_end: Optional[str] = typer.Option(None, "--test-end", help="End of the replay (exclusive)."),
    forecaster: str = typer.Option("lstm", "--forecaster", help="lstm, uc_fourier, holt_winters, seasonal_naive, "
                                   "persistence or sim_seasonal_profile (as backtest fleet)."),
    no_plot: bool = typer.Option(False, "--no-plot"),
    through_worker: bool = typer.Option(False, "--through-worker", help="Run each minute's tick in a real Celery "
                                        "worker process (started and stopped by the replay), as live."),
    forecast_step: bool = typer.Option(False, "--forecast-step", help="With --through-worker: the worker's own "
                                       "forecast step makes the forecasts (the resolver's model, on its schedule, "
                                       "from the log's history before --test-start) instead of --forecaster's."),
    scrape_rounds: bool = typer.Option(False, "--scrape-rounds", help="Count each minute's arrivals as the live "
                                       "scrape does: the simulated instances' readings every 10 s, counted per "
                                       "instance; each tick reads the minute before as counted so far."),
    config: Optional[Path] = ConfigOpt,
    *,
    reading: LogReading,
) -> None:
    """Drive the workers' own tick minute by minute over a log, on the simulator's fleet (real Redis,
    clock injected), and write what `warmcast backtest fleet` writes for its predictive policy."""
    import pandas as pd

    from warmcast.config.settings import load_settings
    from warmcast.cli.backtest import _echo_report
    from warmcast.cli.outputs import out_dir
    from warmup.sim import load_log, write_outputs
    from workers.replay import run_replay

    try:
        ts, te = pd.Timestamp(test_start), (pd.Timestamp(test_end) if test_end else None)
    except ValueError as err:
        raise InputError(f"--test-start/--test-end: {err}") from None
    out_dir(out)   # before the replay: a run of minutes is not lost to an --out it cannot write
    settings = load_settings(config)
    data = load_log(log, **reading.kwargs())
    driver = None
    if through_worker:
        from warmcast.runtime import redis_url
        from workers.replay_worker import WorkerDriver

        driver = WorkerDriver(redis_url(settings), forecast_step=forecast_step)
    elif forecast_step:
        raise InputError("--forecast-step needs --through-worker (the forecast step runs in the worker)")
    result = run_replay(settings, deployment, data, ts, te, forecaster, driver=driver, scrape_rounds=scrape_rounds)
    paths = write_outputs(result, out, plot=not no_plot)
    _echo_report(result)
    typer.echo("wrote " + ", ".join(str(p) for p in paths))


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.command()(replay)
