"""A deployment's ``alerts:`` key: where tiered alert responses go (see warmup/core/alerts.py).

    alerts:
      report_url: https://oncall.example/hooks/warmcast   # the diagnostic report is POSTed here
      report_token_env: ONCALL_TOKEN                      # env var with its bearer token (optional)
      primary_window_min: 10     # a primary response has this long to clear the alert, then medium
      medium_window_min: 15      # ... then severe
      standby: 1                 # instances a medium-tier alert adds (and the planner keeps until resolved)
      settle_min: 30             # rollback target: the last profile that ran this long with no alert
      late_copy_s: 30            # a resolved alert's firing received within this long is a late copy;
                                 # later, the alert fires on and its episode reopens (keep it under
                                 # Alertmanager's group_interval)
      reopen_within_min: 10      # a new firing this soon after the resolution continues the episode
                                 # (flapping): nothing is decided twice
      failover:                  # severe tier: the disaster-recovery target and the redeploy pipeline
        scaler: {kind: webhook, url: https://dr.example/scale}
        redeploy_url: https://ci.example/hooks/redeploy
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from warmcast.config.strict import Strict
from warmcast.text import shown


def _url(v: str | None) -> str | None:
    if v is not None and not v.startswith(("http://", "https://")):
        raise ValueError(f"{shown(v)} must be an http(s):// URL")
    return v


class FailoverSpec(Strict):
    # the DR target, as the deployment's own scaler: key (Deployment checks it with the same rules)
    scaler: dict[str, Any]
    redeploy_url: str | None = None
    redeploy_token_env: str | None = None

    _redeploy = field_validator("redeploy_url")(classmethod(lambda cls, v: _url(v)))


class AlertSpec(Strict):
    report_url: str | None = None
    report_token_env: str | None = None
    primary_window_min: float = Field(10.0, gt=0, le=24 * 60)
    medium_window_min: float = Field(15.0, gt=0, le=24 * 60)
    standby: int = Field(1, ge=1, le=64)
    settle_min: float = Field(30.0, gt=0, le=7 * 24 * 60)
    late_copy_s: float = Field(30.0, ge=0, le=3600)
    reopen_within_min: float = Field(10.0, ge=0, le=24 * 60)
    failover: FailoverSpec | None = None

    _report = field_validator("report_url")(classmethod(lambda cls, v: _url(v)))
