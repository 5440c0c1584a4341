"""``warmcast report shadow``: forecast-only mode's plan beside the fleet the current autoscaler ran
(``workers/shadow_report.py``; the comparison itself: ``warmup/sim/shadow.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")
report_app = typer.Typer(no_args_is_help=True, help="Reports over what the loop recorded.")


@report_app.command("shadow")
def shadow(
    deployment: str = typer.Option(..., "--deployment", "-d", help="Deployment name in the deployments file."),
    since: str = typer.Option("7d", "--since", help="Start of the window: a duration back from --until (7d, 12h, "
                              "90m) or a time (UTC)."),
    until: Optional[str] = typer.Option(None, "--until", help="End of the window (UTC; default: now)."),
    out: Path = typer.Option(..., "--out", help="Directory for report.json, minutes.csv, shadow.png."),
    forecaster: str = typer.Option("seasonal_naive", "--forecaster", help="The model warmcast's fleet is re-simulated with "
                                   "(as backtest fleet): lstm, uc_fourier, holt_winters, seasonal_naive, "
                                   "persistence or sim_seasonal_profile."),
    no_plot: bool = typer.Option(False, "--no-plot"),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Compare the fleet the current autoscaler ran with warmcast's plan, from the shadow records
    that forecast-only mode (dry_run) writes every minute."""
    from datetime import datetime, timezone

    from warmcast.cli.outputs import out_dir
    from warmcast.config.settings import load_settings
    from workers.shadow_report import build, parse_window, summary, write

    start, end = parse_window(since, until, datetime.now(timezone.utc).replace(tzinfo=None))
    out_dir(out)   # before the report is built: the simulation is not lost to an --out it cannot write
    settings = load_settings(config)
    rep = build(settings, deployment, start, end, forecaster)
    paths = write(rep, out, plot=not no_plot)
    typer.echo(summary(rep.doc))
    typer.echo("wrote " + ", ".join(str(p) for p in paths))


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
