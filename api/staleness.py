"""When the workers' plan is too old to serve (issue 32: a stopped loop's last plan was served forever).

The workers store a forecast and a plan every tick.  Once either document an autoscaler
number is made from is older than ``WARMCAST_API_PLAN_MAX_AGE_S`` (default five one-minute
ticks), the KEDA routes answer an error instead (HTTP 503, gRPC UNAVAILABLE): KEDA counts a
failure and, after its ``fallback.failureThreshold``, applies ``fallback.replicas``.  /metrics
drops the stale gauges and exports the age instead; every /v1 answer made from them carries its
``age_s`` and a ``stale`` flag (:meth:`Freshness.stamp`), and the dashboard shows them.  Pure: ``now``
comes from the caller.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from warmcast.errors import WarmcastError

DEFAULT_PLAN_MAX_AGE_S = 300  # five ticks of the planner (plan_every_s 60): a missed tick or two is not a stop
ENV = "WARMCAST_API_PLAN_MAX_AGE_S"


class StalePlan(WarmcastError):
    """The stored plan or forecast is older than the limit: answered as 503 / UNAVAILABLE."""

    def __init__(self, deployment: str, what: str, age_s: float, limit_s: float) -> None:
        self.deployment, self.what, self.age_s, self.limit_s = deployment, what, age_s, limit_s
        super().__init__(f"deployment {deployment}: the workers' {what} is {age_s:.0f} s old, past the limit of "
                         f"{limit_s:g} s ({ENV}); not serving it: are the workers running? (KEDA applies its "
                         "fallback replicas meanwhile)")

    def body(self) -> dict[str, Any]:
        return {"detail": str(self), "stale": True, "deployment": self.deployment, "what": self.what,
                "ageSeconds": round(self.age_s, 1), "maxAgeSeconds": self.limit_s}


def doc_age_s(doc: Optional[dict[str, Any]], now: pd.Timestamp) -> Optional[float]:
    """Seconds since a stored document's ``created_at`` (naive UTC); None without one."""
    stamp = (doc or {}).get("created_at")
    if not stamp:
        return None
    try:
        return float((now - pd.Timestamp(stamp)).total_seconds())
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Freshness:
    """The age of what a deployment's numbers are made from, and whether it is past the limit."""

    plan_age_s: Optional[float]
    forecast_age_s: Optional[float]
    limit_s: float

    @property
    def age_s(self) -> Optional[float]:
        ages = [a for a in (self.plan_age_s, self.forecast_age_s) if a is not None]
        return max(ages) if ages else None

    @property
    def is_stale(self) -> bool:
        return self.stale("") is not None

    def stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the age its numbers have and whether that is past the limit: every /v1 answer
        carries them, as the KEDA routes refuse past the limit and /metrics exports the ages."""
        age = self.age_s
        return {**body, "age_s": None if age is None else round(age, 1), "stale": self.is_stale}

    def stale(self, deployment: str) -> Optional[StalePlan]:
        """The error to answer, naming the older document, or None while both are fresh."""
        for what, age in (("plan", self.plan_age_s), ("forecast", self.forecast_age_s)):
            if age is not None and age > self.limit_s:
                return StalePlan(deployment, what, age, self.limit_s)
        return None


def freshness(forecast: Optional[dict[str, Any]], plan: Optional[dict[str, Any]], limit_s: float,
              now: pd.Timestamp) -> Freshness:
    """A forecast the API computed itself (``source: computed``) is as fresh as its stamp says."""
    return Freshness(doc_age_s(plan, now), doc_age_s(forecast, now), float(limit_s))


def check_fresh(deployment: str, forecast: Optional[dict[str, Any]], plan: Optional[dict[str, Any]],
                limit_s: float, now: pd.Timestamp) -> None:
    """Raise :class:`StalePlan` when either document is past the limit."""
    err = freshness(forecast, plan, limit_s, now).stale(deployment)
    if err is not None:
        raise err
