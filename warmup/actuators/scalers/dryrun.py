"""Dry-run backend: records every decision and applies nothing (forecast-only mode)."""
from __future__ import annotations

from typing import Any, Mapping

from warmup.actuators.scalers.base import Scaler, ScaleResult


class DryRunScaler(Scaler):
    """Records every decision and applies nothing; ``current()`` is the last recorded target."""

    backend = "dryrun"

    def __init__(self, deployment: str, initial: int = 0) -> None:
        super().__init__(deployment)
        self._target = initial
        self.history: list[ScaleResult] = []

    def current(self) -> int:
        return self._target

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        self._target = n
        return {"forecast": dict(forecast) if forecast else None}

    def scale_to(self, n: int, reason: str, forecast: Mapping[str, Any] | None = None) -> ScaleResult:
        result = super().scale_to(n, reason, forecast)
        self.history.append(result)
        return result

