"""The scaler interface every backend implements, and its result.

Every backend *sets a target* (``scale_to(n)``) and never increments, so
repeating a call is harmless.  ``scale_to`` never raises for a backend failure:
the returned :class:`ScaleResult` carries the error, so a broken API server or
webhook does not stop the control loop (bad arguments still raise).
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from warmcast.errors import InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScaleResult:
    deployment: str
    backend: str
    previous: int | None
    target: int
    reason: str
    applied: bool  # the backend accepted the target (False in dry-run or on error)
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def changed(self) -> bool:
        return self.applied and self.previous != self.target

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Scaler(ABC):
    """Sets the replica count of one deployment."""

    backend: str = "?"

    def __init__(self, deployment: str) -> None:
        self.deployment = deployment

    @abstractmethod
    def current(self) -> int:
        """The replica count the backend is set to now."""

    @abstractmethod
    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        """Set the target; return details for the result; raise on failure."""

    def scale_to(self, n: int, reason: str, forecast: Mapping[str, Any] | None = None) -> ScaleResult:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InputError(f"{self.deployment}: replicas must be a non-negative int, got {n!r}")
        if not reason:
            raise InputError(f"{self.deployment}: scale_to needs a reason")
        try:
            previous: int | None = self.current()
        except Exception as err:  # still try to set the target: it is idempotent
            log.warning("%s: reading current replicas failed: %s", self.deployment, err)
            previous = None
        try:
            detail = self._apply(n, reason, forecast)
        except Exception as err:
            msg = f"{self.backend} scaler for {self.deployment}: {type(err).__name__}: {err}"
            log.error("%s", msg)
            return ScaleResult(self.deployment, self.backend, previous, n, reason, applied=False, error=msg)
        return ScaleResult(self.deployment, self.backend, previous, n, reason,
                           applied=self.backend != "dryrun", detail=detail or {})

    def close(self) -> None:
        """Release resources (local processes are stopped)."""



def check_profile(deployment: str, profile: str, known: Any) -> None:
    if profile not in known:
        raise InputError(f"{deployment}: no profile {profile!r}; this scaler has {sorted(known)}")

