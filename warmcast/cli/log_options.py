"""The flags that say how to read a log, shared by every command that reads one
(``ingest``, ``backtest forecast``, ``backtest fleet``).

They are declared once here and added to a command by :func:`log_options`, so a flag
added for ``ingest`` is accepted by the backtests too, with the same name and help.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import typer

from warmcast.errors import InputError

FORMATS = ("auto", "azure", "mooncake", "openai", "counts", "warmcast")
# one help for every --log: count series of any interval work (issue 46: it said "per-minute")
LOG_HELP = ("Per-request log, or count series (time,requests) at any interval: 10 s, 1 min, 5 or 10 min "
            "(any format ingest reads).")
TIME_UNITS = ("datetime", "s", "ms")


@dataclass(frozen=True)
class LogReading:
    """How to read one log: its format and, for logs no preset knows, which columns mean what."""

    fmt: str = "auto"
    tz: str = "UTC"
    start: Optional[str] = None
    time_col: Optional[str] = None
    input_col: Optional[str] = None
    output_col: Optional[str] = None
    count_col: Optional[str] = None
    time_unit: Optional[str] = None

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise InputError(f"--format must be one of {', '.join(FORMATS)}, not {self.fmt!r}")
        if self.time_unit is not None and self.time_unit not in TIME_UNITS:
            raise InputError(f"--time-unit must be one of {', '.join(TIME_UNITS)}, not {self.time_unit!r}")

    def kwargs(self) -> dict[str, Optional[str]]:
        """Keyword arguments for ``warmcast.ingest`` readers (aggregate_file, load_minute_frame, ...)."""
        return asdict(self)


# parameter name -> (typer option, annotation); the order is the order --help shows them in
_OPTIONS: dict[str, tuple[Any, Any]] = {
    "fmt": (typer.Option("auto", "--format", help=f"Log format: {', '.join(FORMATS)}."), str),
    "tz": (typer.Option("UTC", "--tz", help="Time zone of timestamps without an offset."), str),
    "start": (typer.Option(None, "--start", help="Start time for relative timestamps (Mooncake)."),
              Optional[str]),
    "time_col": (typer.Option(None, "--time-col", help="Column holding the request or interval time."),
                 Optional[str]),
    "input_col": (typer.Option(None, "--input-col", help="Column holding prompt tokens."), Optional[str]),
    "output_col": (typer.Option(None, "--output-col", help="Column holding generated tokens."), Optional[str]),
    "count_col": (typer.Option(None, "--count-col", help="Column holding request counts (a count series)."),
                  Optional[str]),
    "time_unit": (typer.Option(None, "--time-unit", help=f"Unit of --time-col: {', '.join(TIME_UNITS)}."),
                  Optional[str]),
}


def option_group(command: Callable[..., Any], param: str, options: dict[str, tuple[Any, Any]],
                 build: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` the typer ``options``; it receives them as one value, ``param=build(**values)``."""
    sig = inspect.signature(command)
    if param not in sig.parameters:
        raise TypeError(f"{command.__name__} needs a {param!r} parameter to receive its flags")
    own = [p for p in sig.parameters.values() if p.name != param]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
             for name, (opt, ann) in options.items()]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        value = build(**{name: kwargs.pop(name) for name in options})
        return command(**kwargs, **{param: value})

    # typer reads the signature and the type hints: show it the command's own parameters plus ours
    wrapper.__signature__ = sig.replace(parameters=own + added)  # type: ignore[attr-defined]
    annotations = {k: v for k, v in command.__annotations__.items() if k != param}
    wrapper.__annotations__ = {**annotations, **{name: ann for name, (_, ann) in options.items()}}
    return wrapper


def log_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` the shared log flags; it receives them as one ``reading: LogReading``."""
    return option_group(command, "reading", _OPTIONS, LogReading)
