"""Kubernetes backends: the scale subresource of one workload, or one workload per profile.

Replicas go through the official ``kubernetes`` client; the reason and forecast are
written as annotations on the workload.
"""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Mapping

from warmcast.errors import InputError, WarmcastError
from warmcast.text import clip
from warmup.actuators.scalers.base import Scaler, check_profile

MERGE = "application/merge-patch+json"


def launches_of(obj: Any, prefix: str) -> list[float]:
    """The launch times (epoch s) of the workload's pods not seen ready yet, oldest first."""
    try:
        return [float(t) for t in json.loads((obj.metadata.annotations or {}).get(f"{prefix}/launches", "[]"))]
    except (TypeError, ValueError):
        return []


def pending_after(pending: list[float], before: int, after: int, now: float) -> list[float]:
    """Pending launches once the spec goes ``before`` -> ``after``: a raise adds launches at ``now``;
    a cut removes the newest pending ones first (a Deployment removes unready pods first)."""
    if after > before:
        return pending + [now] * (after - before)
    return pending[:max(0, len(pending) - (before - after))]


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
                 api_client: Any = None, annotation_prefix: str = "warmcast.io",
                 profiles: Mapping[str, Mapping[str, Any]] | None = None, model: str = "",
                 default_profile: str | None = None) -> None:
        super().__init__(deployment)
        self.profiles, self.model = {k: dict(v) for k, v in (profiles or {}).items()}, model
        self.default_profile = default_profile or next(iter(self.profiles), "")
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

    def _call(self, verb: str, suffix: str = "", *body: Any) -> Any:
        """``apps.{verb}_namespaced_{deployment|stateful_set}{suffix}`` on this workload: the one
        place the workload kind picks the client method (patches force the merge-patch type)."""
        kind = "deployment" if self.kind == "deployment" else "stateful_set"
        method = getattr(self.apps, f"{verb}_namespaced_{kind}{suffix}")
        extra = {"_content_type": MERGE} if verb == "patch" else {}
        return method(self.name, self.namespace, *body, **extra)

    def current(self) -> int:
        return int(self._call("read", "_scale").spec.replicas or 0)

    def annotations(self) -> dict[str, str]:
        return dict(self.workload().metadata.annotations or {})

    def workload(self) -> Any:
        return self._call("read")

    def ready(self) -> int:
        """Ready pods of the workload (``status.readyReplicas``)."""
        obj = self.workload()
        return int((obj.status.ready_replicas if obj.status else 0) or 0)

    def observe_launches(self, now: float | None = None) -> list[float]:
        """Launch-to-ready seconds of this scaler's launches that became ready since the last call
        (for ``workers.lead``).  Pending launches live in the ``launches`` annotation, so any worker
        sees them; the oldest are taken as ready first."""
        obj = self.workload()
        pending = launches_of(obj, self.prefix)
        if not pending:
            return []
        now = time.time() if now is None else now
        spec, ready = int(obj.spec.replicas or 0), int((obj.status.ready_replicas if obj.status else 0) or 0)
        done = max(0, min(len(pending), ready - (spec - len(pending))))
        if done:
            self._annotate({f"{self.prefix}/launches": json.dumps(pending[done:])})
        return [max(0.0, now - t) for t in pending[:done]]

    def roll_profile(self, profile: str, replicas: int | None = None) -> dict[str, Any]:
        """Switch the single workload to ``profile`` by a surge-only rolling update (``k8s_roll``),
        with ``replicas`` pods in the same patch when given."""
        from warmup.actuators.launch import container_args
        from warmup.actuators.scalers.k8s_roll import roll_to

        check_profile(self.deployment, profile, self.profiles)
        return roll_to(self, profile, container_args(self.model, self.profiles[profile]), replicas=replicas)

    def ready_by_profile(self) -> dict[str, int]:
        from warmup.actuators.scalers import k8s_roll

        return k8s_roll.ready_by_profile(self)

    def _annotate(self, notes: Mapping[str, str]) -> None:
        self._call("patch", "", {"metadata": {"annotations": dict(notes)}})

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        obj = self.workload()
        pending = pending_after(launches_of(obj, self.prefix), int(obj.spec.replicas or 0), n, time.time())
        scale = self._call("patch", "_scale", {"spec": {"replicas": n}})
        notes = {
            f"{self.prefix}/reason": clip(reason, 1000),
            f"{self.prefix}/target-replicas": str(n),
            f"{self.prefix}/updated-at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            f"{self.prefix}/launches": json.dumps(pending),
        }
        if forecast:
            notes[f"{self.prefix}/forecast"] = json.dumps(dict(forecast), separators=(",", ":"), default=str)[:4000]
        self._annotate(notes)
        return {"resource": f"{self.kind}/{self.name}", "namespace": self.namespace,
                "spec_replicas": scale.spec.replicas, "status_replicas": scale.status.replicas}



class KubernetesProfileScaler(Scaler):
    """One Kubernetes workload per profile (``scaler.profile_resources``): replicas are the sum.

    A profile switch moves replicas between the workloads: :meth:`set_replicas` sets each
    workload's count that the switch's phase gives (raising before cutting, so capacity never
    dips; a rollback is the same call with the old side restored).  The planner's ``scale_to`` changes the workload serving the
    most replicas (the active profile; the first profile on a tie), scaling in the others first.
    """

    backend = "kubernetes"

    def __init__(self, deployment: str, resources: Mapping[str, str], namespace: str = "default", *,
                 api_client: Any = None, route: Any = None) -> None:
        super().__init__(deployment)
        if not resources:
            raise InputError(f"{deployment}: profile_resources is empty")
        self.parts = {p: KubernetesScaler(f"{deployment}/{p}", r, namespace, api_client=api_client)
                      for p, r in resources.items()}
        self.route = None
        if route is not None:   # the deployment's route (warmcast.config.deployments.RouteSpec)
            from warmup.actuators.scalers.k8s_route import HTTPRouteWeights

            api = next(iter(self.parts.values())).apps.api_client
            self.route = HTTPRouteWeights(route.httproute, route.namespace or namespace, route.backends, api)

    def set_weights(self, weights: Mapping[str, int]) -> dict[str, Any]:
        """A switch's route weights per profile (needs the deployment's ``route:``)."""
        if self.route is None:
            raise WarmcastError(f"{self.deployment}: no route: set route.httproute and route.backends to shift "
                                "requests by weight")
        return self.route.set_weights(weights)

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

    def set_replicas(self, want: Mapping[str, int], reason: str) -> dict[str, Any]:
        """Replicas per profile (a switch's split): raises first, then cuts, so the target's pods
        are asked for before any old one goes; the core cuts the old only as targets are ready."""
        for p in want:
            check_profile(self.deployment, p, self.parts)
        have = self.replicas()
        return self._set({**have, **{p: int(n) for p, n in want.items()}}, reason, None)

    def ready_by_profile(self) -> dict[str, int]:
        """Ready pods per profile: ``status.readyReplicas`` of each profile's workload."""
        return {p: s.ready() for p, s in self.parts.items()}

    def observe_launches(self, now: float | None = None) -> list[float]:
        return [x for s in self.parts.values() for x in s.observe_launches(now)]

    def profile_of(self) -> dict[str, str]:
        return {}  # pods are not addressed one by one here; Prometheus signals carry no profile

