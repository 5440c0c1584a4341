"""Errors of the vLLM client; each names the instance."""
from __future__ import annotations

from warmcast.errors import WarmcastError


class InstanceError(WarmcastError):
    """A request to one vLLM instance failed for good; the message names the instance."""

    def __init__(self, instance: str, message: str, *, status: int | None = None) -> None:
        super().__init__(f"vLLM instance {instance}: {message}")
        self.instance = instance
        self.status = status


class InstanceUnavailable(InstanceError):
    """The instance did not answer (or kept answering 5xx/429) after every retry."""


class SleepModeUnavailable(InstanceError):
    """Sleep/wake was asked of an instance that cannot do it; the message says why."""

