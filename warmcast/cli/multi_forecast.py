"""``warmcast backtest forecast --series-col COL``: the backtest on every series of a multi-series
file (issue 43), the fleet model fitted once on all of them (:mod:`forecaster.multi_backtest`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forecaster.catalogue import ALL_MODELS
from warmcast.cli.log_options import LogReading
from warmcast.errors import InputError

# the per-deployment LSTM is left out by default: one fit per series (26-33 s each) is the cost the
# fleet model exists to avoid; name it in --models to run it anyway
MULTI_MODELS = ("lstm_global", *(m for m in ALL_MODELS if m != "lstm"))
MAX_SERIES = 5000  # every per-series model is fitted per series: a file with more is refused, not run for hours


def _models(models: Optional[str]) -> list[str]:
    names = list(MULTI_MODELS) if models is None else [m.strip() for m in models.split(",") if m.strip()]
    known = {"lstm_global", "lstm_global_no_recurrent", *ALL_MODELS, "lstm_no_recurrent"}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise InputError(f"unknown model(s) {unknown}; choose from {sorted(known)}")
    return names


def backtest_series(log: Path, series_col: str, test_start: str, out: Path, models: Optional[str], horizon: int,
                    step: int, quick: bool, reading: LogReading) -> None:
    """Read the file as a panel, run every model on every series, write the outputs and the table."""
    import pandas as pd

    from forecaster.multi_backtest import multi_summary, multi_table, run_multi_backtest, write_multi_outputs
    from warmcast.resolution import steps_for
    from warmcast.cli.series_file import load_panel

    names = _models(models)
    try:
        t = pd.Timestamp(test_start)
    except ValueError:
        raise InputError(f"--test-start {test_start!r} is not a time (use 'YYYY-MM-DD HH:MM')") from None
    read = load_panel(log, series_col.split(","), reading.time_col, reading.count_col, reading.tz, reading.time_unit)
    panel = read.panel
    if len(panel) > MAX_SERIES:
        raise InputError(f"{log}: {len(panel)} series; the backtest runs at most {MAX_SERIES:,} "
                         "(each per-series model is fitted on each one)")
    if not (panel.index[0] < t <= panel.index[-1]):
        raise InputError(f"--test-start {t} must lie inside the log ({panel.index[0]} .. {panel.index[-1]})")
    typer.echo(read.note)
    try:
        res = run_multi_backtest(panel, t, names, horizon=steps_for(horizon, panel.step_min), step=step,
                                 quick=quick)
    except ValueError as err:
        raise InputError(str(err)) from None
    paths = write_multi_outputs(res, out)
    typer.echo(multi_table(res.metrics))
    typer.echo(multi_summary(res.metrics))
    typer.echo("wrote " + ", ".join(str(p) for p in paths.values()))
