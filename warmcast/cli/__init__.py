"""The ``warmcast`` command-line program: one module per command group in this package, each a
thin layer over the package that does the work. It sits above every other package (it may
import any of them; none imports it), see tests/test_layout.py."""
from __future__ import annotations

import importlib
import sys

import typer

from warmcast.errors import WarmcastError

# Plain click help, not rich's panels (rich_markup_mode=None, inherited by every subcommand): at
# 80 columns rich's option table cut option names and defaults with "…" (issue 32); click writes
# every name in full and wraps only the help text.
app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
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

# One module per command group, each with ``register(app, backtest)``; imported only when the
# program runs, and each imports its package's heavy parts (torch, statsmodels) only inside
# the command that needs them, so ``warmcast --help`` stays fast.
_COMMAND_MODULES = ("foundation", "forecast", "backtest", "nodes", "pools", "advise", "alerts",
                    "instances", "calibrate", "loop", "replay", "report", "api")


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(f"warmcast.cli.{name}").register(app, backtest_app)


def main() -> None:
    """Run the program. Usage mistakes are click's to report (usage line, hint, exit 2);
    a :class:`WarmcastError` from a command prints its one-line message and exits 2."""
    _register_all()
    try:
        app()  # standalone: click prints usage errors itself and exits with their code
    except WarmcastError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        sys.exit(2)

