"""A deployment's asleep tier (the ``sleep:`` key of the deployments file, issue 19).

vLLM's sleep mode keeps an instance allocated but idle; it wakes in seconds instead of a cold
start.  ``wake_s`` is the recorded wake time (measured on a GPU by ``warmcast measure-coldstart``
where one is available; otherwise a figure the operator states), ``cost_share`` what an asleep
instance costs as a share of a GPU-hour (default 1.0: the GPU stays allocated), and
``buffer_asleep`` whether the warm buffer is kept asleep rather than ready.
"""
from __future__ import annotations

from pydantic import Field

from warmcast.config.strict import Strict


class SleepTier(Strict):
    wake_s: float = Field(..., gt=0, le=3600, description="seconds from /wake_up to serving")
    cost_share: float = Field(1.0, ge=0, le=1, description="an asleep instance's share of a GPU-hour")
    buffer_asleep: bool = Field(False, description="keep the warm buffer asleep rather than ready")
