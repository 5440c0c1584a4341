"""The base of every deployments-file section."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not pass silently as a default); values are frozen; a number
    must be finite (YAML's ``.inf`` or ``.nan`` as a capacity passed every bound and reached
    ``/v1/keda`` as ``Infinity``, which is not JSON: issue 31)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Upper bounds of the integer keys (issue 41: ``max_replicas: 99999999999999999999`` was accepted and
# reached the planner): far above any real fleet, far below what breaks arithmetic or a Redis field.
MAX_INSTANCES = 10_000       # replicas or instances of one deployment or pool
MAX_GPUS = 1_000_000         # GPUs of one deployment's budget or shared limits
MAX_TOKENS = 10_000_000      # tokens of one request (as warmcast.ingest.accumulate.MAX_TOKENS)
MAX_QUEUE = 10_000_000       # requests waiting in one queue
