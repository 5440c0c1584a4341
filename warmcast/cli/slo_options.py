"""The SLO-tuning flags of ``warmcast backtest fleet``, added by :func:`slo_options` as one value
(the pattern of ``warmcast.cli.log_options``), so the command stays one screen long."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import typer

from warmcast.cli.log_options import option_group


@dataclass(frozen=True)
class SLOFlags:
    late_share: Optional[float] = None
    wait_s: Optional[float] = None
    tune: bool = False
    validation_days: float = 2.0
    windows: int = 1

    @property
    def wanted(self) -> bool:
        return self.tune or self.late_share is not None or self.wait_s is not None


_OPTIONS: dict[str, tuple[Any, Any]] = {
    "late_share": (typer.Option(None, "--slo-late-share", min=0, max=1, help="Tune every policy's knobs for this "
                                "SLO (share of requests allowed to wait too long) on the days before --test-start."),
                   Optional[float]),
    "wait_s": (typer.Option(None, "--slo-wait-s", min=0.001, help="SLO: a request waiting longer than this is "
                            "late (default the deployment's slo:, else 5)."), Optional[float]),
    "tune": (typer.Option(False, "--tune-slo", help="Tune for the deployment's slo: key (or the default SLO) "
                          "without naming its numbers."), bool),
    "validation_days": (typer.Option(2.0, "--validation-days", min=0.1, help="Days before --test-start the SLO "
                                     "tuning simulates (the forecaster trains before them)."), float),
    "windows": (typer.Option(1, "--tune-windows", min=1, max=14, help="Consecutive windows of --validation-days "
                             "a setting must meet the SLO on (its worst counts)."), int),
}


def slo_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` the SLO flags; it receives them as one ``slo_flags: SLOFlags``."""
    return option_group(command, "slo_flags", _OPTIONS, SLOFlags)
