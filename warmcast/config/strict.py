"""The base of every deployments-file section."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not pass silently as a default); values are frozen; a number
    must be finite (YAML's ``.inf`` or ``.nan`` as a capacity passed every bound and reached
    ``/v1/keda`` as ``Infinity``, which is not JSON: issue 31)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
