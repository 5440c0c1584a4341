"""The base of every deployments-file section."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not pass silently as a default); values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
