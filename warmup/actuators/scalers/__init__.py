"""Scaler backends: one interface (:class:`Scaler`), one module per way to set a
deployment's replica count.

- :mod:`.kubernetes`: the scale subresource of a Deployment/StatefulSet through the
  official ``kubernetes`` client, with the reason and forecast written as annotations
  on the workload; or one workload per profile.
- :mod:`.local_process`: vLLM server processes on loopback ports of this machine.
- :mod:`.webhook`: POSTs ``{"deployment", "replicas", "reason", ...}`` JSON to a URL,
  for any other autoscaler.
- :mod:`.dryrun`: records only (forecast-only mode).

:func:`scaler_for` builds the one a deployment asks for.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from warmcast.errors import InputError
from warmup.actuators.scalers.base import Scaler, ScaleResult
from warmup.actuators.scalers.dryrun import DryRunScaler
from warmup.actuators.scalers.kubernetes import KubernetesProfileScaler, KubernetesScaler
from warmup.actuators.scalers.local_process import LocalProcessScaler, local_scaler, local_scaler_factory
from warmup.actuators.scalers.webhook import WebhookScaler

__all__ = [
    "DryRunScaler", "KubernetesProfileScaler", "KubernetesScaler", "LocalProcessScaler", "ScaleResult", "Scaler",
    "WebhookScaler", "local_scaler_factory", "scaler_for",
]


def scaler_for(deployment: Any, *, dry_run: bool = False, state_dir: str | Path | None = None,
               **local_kwargs: Any) -> Scaler:
    """Build the scaler a :class:`warmcast.config.deployments.Deployment` asks for.

    ``dry_run`` (the settings' forecast-only mode) always gives a DryRunScaler.
    The local backend is cached per deployment in this process and keeps its
    processes in ``STATE/local-scaler/NAME.json`` (``state_dir``, else
    ``$WARMCAST_STATE_DIR``, else a temp dir), so every call and every worker
    process sees the same servers; they are not stopped when a worker exits.
    """
    spec = deployment.scaler
    if dry_run or spec.kind == "dryrun":
        return DryRunScaler(deployment.name, initial=deployment.min_replicas)
    if spec.kind == "kubernetes" and spec.profile_resources:
        return KubernetesProfileScaler(deployment.name, spec.profile_resources, spec.namespace,
                                       route=getattr(deployment, "route", None))
    if spec.kind == "kubernetes":
        return KubernetesScaler(deployment.name, spec.resource, spec.namespace, model=deployment.model or "",
                                profiles={p: prof.engine_args for p, prof in deployment.profiles.items()},
                                default_profile=deployment.default_profile)
    if spec.kind == "webhook":
        token = os.environ.get(spec.token_env) if spec.token_env else None
        return WebhookScaler(deployment.name, spec.url, token=token)
    if spec.kind == "local":
        return local_scaler(deployment, state_dir, **local_kwargs)
    raise InputError(f"deployment {deployment.name}: unknown scaler kind {spec.kind!r}")
