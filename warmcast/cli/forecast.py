"""Forecaster commands: ``warmcast backtest forecast``, ``warmcast train``, ``warmcast forecast``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from forecaster.catalogue import ALL_MODELS, make_models
from warmcast.errors import InputError
from warmcast.cli.log_options import LOG_HELP, LogReading, log_options

ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


@log_options
def backtest_forecast(
    log: Path = typer.Option(..., "--log", help=LOG_HELP),
    test_start: str = typer.Option(..., "--test-start", help="First forecast origin, 'YYYY-MM-DD HH:MM' (UTC)."),
    out: Path = typer.Option(..., "--out", help="Folder for forecasts.csv, metrics.json, forecast.png."),
    models: str = typer.Option(",".join(ALL_MODELS), "--models", help="Comma-separated models to run."),
    horizon: int = typer.Option(30, min=1, max=30, help="Minutes ahead (in the series' bins: 6 leads at 5 min)."),
    step: int = typer.Option(10, min=1, help="Minutes between forecast origins (a multiple of the series' bin)."),
    quick: bool = typer.Option(False, help="A tiny LSTM (smoke tests)."),
    series_col: Optional[str] = typer.Option(
        None, "--series-col", help="Column(s) naming each series of a multi-series file (client, tenant, API "
        "key; comma-separated for several): every model on every series, the fleet model lstm_global trained "
        "once on all of them; --models defaults then to lstm_global and the baselines."),
    *,
    reading: LogReading,
) -> None:
    """Rolling-origin backtest: fit before --test-start, forecast leads 1..30 every 10 minutes."""
    import pandas as pd

    if series_col is not None:
        from warmcast.cli.multi_forecast import backtest_series

        backtest_series(log, series_col, test_start, out, None if models == ",".join(ALL_MODELS) else models,
                        horizon, step, quick, reading)
        return

    from forecaster.backtest import run_backtest, summary, table, write_outputs
    from warmcast.ingest import load_minute_frame
    from warmcast.resolution import resolution_of, steps_for

    if not log.exists():
        raise InputError(f"--log {log} does not exist")
    try:
        t = pd.Timestamp(test_start)
    except ValueError:
        raise InputError(f"--test-start {test_start!r} is not a time (use 'YYYY-MM-DD HH:MM')") from None
    frame = load_minute_frame(log, **reading.kwargs())
    if len(frame) == 0:
        raise InputError(f"{log}: no load found")
    if not (frame.index[0] < t <= frame.index[-1]):
        raise InputError(f"--test-start {t} must lie inside the log ({frame.index[0]} .. {frame.index[-1]})")
    names = [m.strip() for m in models.split(",") if m.strip()]
    r = resolution_of(frame)
    if r > 1:
        typer.echo(f"{log}: a count series at {r}-minute resolution: forecasting {r}-minute bins, "
                   f"{steps_for(horizon, r)} leads for {horizon} minutes")
    try:
        res = run_backtest(frame, t, make_models(names, quick), horizon=steps_for(horizon, r), step=step)
    except ValueError as err:
        raise InputError(str(err)) from None
    paths = write_outputs(res, out)
    typer.echo(table(res.metrics))
    typer.echo(summary(res.metrics))
    typer.echo("wrote " + ", ".join(str(p) for p in paths.values()))


def _registry(config):
    from forecaster.registry import Registry
    from warmcast.config.settings import load_settings

    return Registry(load_settings(config).models_dir)


def _frame(config, deployment: str):
    from warmcast.runtime import open_store
    from warmcast.config.settings import load_settings

    return open_store(load_settings(config)).frame(deployment)


def train(
    deployment: Optional[str] = typer.Option(None, "--deployment", "-d"),
    val_hours: float = typer.Option(24.0, "--val-hours", min=1, help="Recent validation window for promotion."),
    quick: bool = typer.Option(False, help="A tiny LSTM scored against the naive baselines only (smoke tests)."),
    fleet: bool = typer.Option(False, "--fleet", help="Train the fleet model: one LSTM over every stored "
                                                      "deployment and its client series, judged per deployment."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Train a challenger LSTM on the stored load; promote it if it beats the champion and the baselines."""
    if fleet:
        if deployment is not None:
            raise InputError("--fleet trains one model over every deployment: leave out --deployment")
        return _train_fleet(config, val_hours, quick)
    if deployment is None:
        raise InputError("train needs --deployment D (or --fleet for the fleet model)")
    from forecaster.live import train_deployment
    from forecaster.lstm import LSTMConfig

    from forecaster.base import DAY
    from forecaster.baselines import Persistence, SeasonalNaive

    frame = _frame(config, deployment)
    rep = train_deployment(frame, _registry(config), deployment, val_hours=val_hours,
                           config=LSTMConfig.tiny(epochs=4) if quick else None,
                           baselines=[Persistence(), SeasonalNaive(DAY)] if quick else None)
    typer.echo(rep.summary())


def _train_fleet(config, val_hours: float, quick: bool) -> None:
    from forecaster.base import DAY
    from forecaster.baselines import Persistence, SeasonalNaive
    from forecaster.global_lstm import GlobalLSTM, fleet_config, tiny_fleet_config
    from forecaster.global_lstm.live import fleet_data, train_fleet
    from warmcast.config.settings import load_settings
    from warmcast.runtime import open_store

    def make(horizon_min: int) -> GlobalLSTM:
        return GlobalLSTM(tiny_fleet_config(epochs=4) if quick else fleet_config(), horizon_min=horizon_min)

    data = fleet_data(open_store(load_settings(config)))
    rep = train_fleet(data, _registry(config), make, val_hours=val_hours,
                      baselines=(lambda: [Persistence(), SeasonalNaive(DAY)]) if quick else None)
    typer.echo(rep.summary())


def _history(config, deployment: str):
    """The window every serving forecast reads (forecaster.live.serving_history), as the API and the workers."""
    from forecaster.live import serving_history
    from warmcast.config.settings import load_settings
    from warmcast.runtime import open_store

    settings = load_settings(config)
    return serving_history(open_store(settings), deployment, settings.forecast_history_days)


def forecast(
    deployment: str = typer.Option(..., "--deployment", "-d"),
    horizon: int = typer.Option(30, min=1, max=30),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Forecast the next minutes of a deployment's load (champion model, else a baseline)."""
    from forecaster.live import forecast_deployment, forecast_table

    from forecaster.live import serving_clients
    from warmcast.config.settings import load_settings
    from warmcast.runtime import open_store

    frame = _history(config, deployment)
    if len(frame) == 0:
        raise InputError(f"no load stored for {deployment!r}; ingest a log first")
    settings = load_settings(config)
    clients = serving_clients(open_store(settings), deployment, settings.forecast_history_days)
    f = forecast_deployment(frame, _registry(config), deployment, horizon=horizon, clients=clients)
    tab = forecast_table(f)
    if as_json:
        typer.echo(json.dumps({"deployment": deployment, "origin": f.origin.strftime("%Y-%m-%d %H:%M:%S"),
                               "resolution_min": f.step_min, "model": f.model, "version": f.version, "note": f.note,
                               "forecast": tab.to_dict(orient="records")}, indent=2))
        return
    per = "" if f.step_min == 1 else f" in {f.step_min}-minute bins (values: requests per {f.step_min} min)"
    typer.echo(f"{deployment}: forecast from {f.origin:%Y-%m-%d %H:%M} UTC by {f.model} {f.version}{per}")
    if f.note:
        typer.echo(f"note: {f.note}")
    typer.echo(tab.to_string(index=False))


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    backtest.command("forecast")(backtest_forecast)
    app.command("train")(train)
    app.command("forecast")(forecast)
