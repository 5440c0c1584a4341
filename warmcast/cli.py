"""The ``warmcast`` command-line program.

Each package adds its own subcommands through a ``register(app, backtest)``
function in its ``cli`` module, so this file stays small and imports nothing heavy
(torch, statsmodels) until a command that needs it runs.
"""
from __future__ import annotations

import importlib
import sys

import typer

from warmcast.errors import WarmcastError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="warmcast: forecast LLM load and keep vLLM fleets warm before traffic arrives.")
backtest_app = typer.Typer(no_args_is_help=True, help="Replay logs offline: forecast accuracy, fleet policies.")
app.add_typer(backtest_app, name="backtest")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"warmcast {version('warmcast')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("warmcast (not installed: pip install -e .)")
        raise typer.Exit()


@app.callback()
def _main(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                            help="Print warmcast's version and exit.")) -> None:
    """warmcast: forecast LLM load and keep vLLM fleets warm before traffic arrives."""

# Packages that contribute commands; a missing one is skipped so a partial install still works.
_COMMAND_MODULES = (
    "warmcast.commands",
    "forecaster.cli",
    "warmup.cli",
    "warmup.pools_cli",
    "warmup.advise_cli",
    "warmup.alerts_cli",
    "warmup.actuators.cli",
    "warmup.calibration.cli",
    "workers.cli",
    "workers.replay_cli",
    "api.cli",
)


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if name == err.name or name.startswith(f"{err.name}."):  # absent, not broken inside
                continue
            raise
        module.register(app, backtest_app)


def main() -> None:
    """Run the program. Usage mistakes are click's to report (usage line, hint, exit 2);
    a :class:`WarmcastError` from a command prints its one-line message and exits 2."""
    _register_all()
    try:
        app()  # standalone: click prints usage errors itself and exits with their code
    except WarmcastError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        sys.exit(2)

if __name__ == "__main__":
    main()
