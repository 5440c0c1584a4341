"""Kubernetes backends: the scale subresource of one workload, or one workload per profile.

Replicas go through the official ``kubernetes`` client; the reason and forecast are
written as annotations on the workload.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Mapping

from warmcast.errors import InputError, WarmcastError
from warmup.actuators.scalers.base import Scaler, check_profile, profile_target

MERGE = "application/merge-patch+json"


class KubernetesScaler(Scaler):
    """The scale subresource of ``deployment/NAME`` or ``statefulset/NAME``.

    Replicas go through ``patch_namespaced_{deployment,stateful_set}_scale`` (a
    merge patch of ``spec.replicas``: a target, never an increment); the reason,
    target, forecast and time are then written as annotations (prefix
    ``warmcast.io/``) on the workload itself, since the Scale object does not
    keep annotations.  Pitfall: for a dict body the client picks the
    ``application/json-patch+json`` content type (it lists it first), which an
    API server rejects for an object body; the merge-patch type is forced.  Without an
    ``api_client`` the in-cluster config is tried, then ``~/.kube/config``.
    """

    backend = "kubernetes"

    def __init__(self, deployment: str, resource: str, namespace: str = "default", *,
                 api_client: Any = None, annotation_prefix: str = "warmcast.io") -> None:
        super().__init__(deployment)
        kind, _, name = resource.partition("/")
        if kind not in ("deployment", "statefulset") or not name:
            raise InputError(f"kubernetes resource must be deployment/NAME or statefulset/NAME, got {resource!r}")
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self.kind, self.name, self.namespace = kind, name, namespace
        self.apps = client.AppsV1Api(api_client)
        self.prefix = annotation_prefix.rstrip("/")

    def _read_scale(self) -> Any:
        if self.kind == "deployment":
            return self.apps.read_namespaced_deployment_scale(self.name, self.namespace)
        return self.apps.read_namespaced_stateful_set_scale(self.name, self.namespace)

    def current(self) -> int:
        scale = self._read_scale()
        return int(scale.spec.replicas or 0)

    def annotations(self) -> dict[str, str]:
        if self.kind == "deployment":
            obj = self.apps.read_namespaced_deployment(self.name, self.namespace)
        else:
            obj = self.apps.read_namespaced_stateful_set(self.name, self.namespace)
        return dict(obj.metadata.annotations or {})

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        body = {"spec": {"replicas": n}}
        if self.kind == "deployment":
            scale = self.apps.patch_namespaced_deployment_scale(self.name, self.namespace, body, _content_type=MERGE)
        else:
            scale = self.apps.patch_namespaced_stateful_set_scale(self.name, self.namespace, body, _content_type=MERGE)
        notes = {
            f"{self.prefix}/reason": reason[:1000],
            f"{self.prefix}/target-replicas": str(n),
            f"{self.prefix}/updated-at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        if forecast:
            notes[f"{self.prefix}/forecast"] = json.dumps(dict(forecast), separators=(",", ":"), default=str)[:4000]
        meta = {"metadata": {"annotations": notes}}
        if self.kind == "deployment":
            self.apps.patch_namespaced_deployment(self.name, self.namespace, meta, _content_type=MERGE)
        else:
            self.apps.patch_namespaced_stateful_set(self.name, self.namespace, meta, _content_type=MERGE)
        return {"resource": f"{self.kind}/{self.name}", "namespace": self.namespace,
                "spec_replicas": scale.spec.replicas, "status_replicas": scale.status.replicas}



class KubernetesProfileScaler(Scaler):
    """One Kubernetes workload per profile (``scaler.profile_resources``): replicas are the sum.

    A profile switch moves replicas between the workloads: :meth:`prewarm` adds to the target's,
    :meth:`set_profile` gives the target ``ceil(share * total)`` and takes them from the others
    (raising the target first, so capacity never dips), and a rollback is ``set_profile`` of the
    previous profile with share 1.  The planner's ``scale_to`` changes the workload serving the
    most replicas (the active profile; the first profile on a tie), scaling in the others first.
    """

    backend = "kubernetes"

    def __init__(self, deployment: str, resources: Mapping[str, str], namespace: str = "default", *,
                 api_client: Any = None) -> None:
        super().__init__(deployment)
        if not resources:
            raise InputError(f"{deployment}: profile_resources is empty")
        self.parts = {p: KubernetesScaler(f"{deployment}/{p}", r, namespace, api_client=api_client)
                      for p, r in resources.items()}

    def replicas(self) -> dict[str, int]:
        return {p: s.current() for p, s in self.parts.items()}

    def current(self) -> int:
        return sum(self.replicas().values())

    def _set(self, want: dict[str, int], reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        have = self.replicas()
        order = sorted(want, key=lambda p: want[p] <= have[p])  # increases before decreases
        for p in order:
            if want[p] != have[p]:
                res = self.parts[p].scale_to(want[p], reason, forecast)
                if not res.applied:
                    raise WarmcastError(res.error)
        return {"replicas": want, "before": have}

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        have = self.replicas()
        active = max(have, key=lambda p: have[p])  # max keeps the first profile on a tie
        want = dict(have)
        if n >= sum(have.values()):
            want[active] += n - sum(have.values())
        else:
            drop = sum(have.values()) - n
            for p in sorted(want, key=lambda p: p == active):  # the other profiles first
                d = min(drop, want[p])
                want[p] -= d
                drop -= d
        return self._set(want, reason, forecast)

    def set_profile(self, profile: str, share: float) -> dict[str, Any]:
        have = self.replicas()
        total = sum(have.values())
        target = max(have.get(profile, 0), profile_target(self.deployment, profile, self.parts, share, total))
        want = dict(have)
        want[profile] = target
        excess = sum(want.values()) - total
        for p in sorted((p for p in want if p != profile), key=lambda p: -want[p]):
            d = min(excess, want[p])
            want[p] -= d
            excess -= d
        out = self._set(want, f"profile switch: {share:.0%} of capacity on {profile}", None)
        return {"profile": profile, "on_profile": target, "of": total, "restarted": [], **out}

    def prewarm(self, profile: str, n: int) -> dict[str, Any]:
        check_profile(self.deployment, profile, self.parts)
        have = self.replicas()
        want = {**have, profile: have[profile] + max(0, int(n))}
        out = self._set(want, f"pre-warm {n} {profile} replica(s) ahead of a switch", None)
        return {"started": [f"{self.parts[profile].kind}/{self.parts[profile].name} +{n}"], **out}

    def profile_of(self) -> dict[str, str]:
        return {}  # pods are not addressed one by one here; Prometheus signals carry no profile

