"""A profile switch on a single Kubernetes workload: its pod template's args are patched with a
surge-only rolling update (``maxUnavailable: 0``), so Kubernetes starts pods on the new args
before it removes old ones and ready capacity never dips.

A StatefulSet cannot do this: its rolling update has no ``maxSurge`` and deletes each pod before
its replacement starts, so :func:`roll_to` refuses it with that reason (run one workload per
profile instead: ``scaler.profile_resources``).  The patch carries the workload's
``resourceVersion``: a concurrent writer makes the API answer 409, and the patch is rebuilt from
a fresh read.  It may carry ``spec.replicas`` too (the target profile's count, from
``warmup.core.switch_capacity.single_workload_replicas``): profiles serve different req/min per
replica, so the same pod count on the new args can be less capacity; one patch sets both, so the
rollout is sized for the target from its first new pod.
"""
from __future__ import annotations

from typing import Any, Mapping

from warmcast.errors import WarmcastError

STRATEGIC = "application/strategic-merge-patch+json"
RETRIES = 3


def roll_to(scaler: Any, profile: str, args: list[str], *, container: str | None = None,
            max_surge: str | int = "100%", replicas: int | None = None) -> dict[str, Any]:
    """Patch ``scaler``'s Deployment to run ``args`` (profile ``profile``) by a surge-only rollout,
    with ``replicas`` pods when given (else the count stays)."""
    from kubernetes.client.rest import ApiException

    if scaler.kind != "deployment":
        raise WarmcastError(f"{scaler.kind}/{scaler.name} cannot switch profiles in place without losing "
                            "ready capacity: a StatefulSet rolling update has no maxSurge (each pod is deleted "
                            "before its replacement starts); run one workload per profile (profile_resources)")
    for attempt in range(RETRIES):
        obj = scaler.workload()
        notes = obj.metadata.annotations or {}
        current = notes.get(f"{scaler.prefix}/profile") or scaler.default_profile
        if current == profile:
            return {"profile": profile, "patched": False, "attempts": attempt + 1}
        name = container or obj.spec.template.spec.containers[0].name
        body = {"metadata": {"resourceVersion": obj.metadata.resource_version,
                             "annotations": {f"{scaler.prefix}/profile": profile,
                                             f"{scaler.prefix}/previous-profile": current}},
                "spec": {"strategy": {"type": "RollingUpdate",
                                      "rollingUpdate": {"maxUnavailable": 0, "maxSurge": max_surge}},
                         "template": {"metadata": {"annotations": {f"{scaler.prefix}/profile": profile}},
                                      "spec": {"containers": [{"name": name, "args": list(args)}]}}}}
        if replicas is not None:
            body["spec"]["replicas"] = int(replicas)
        try:
            scaler.apps.patch_namespaced_deployment(scaler.name, scaler.namespace, body, _content_type=STRATEGIC)
        except ApiException as err:
            if err.status == 409 and attempt + 1 < RETRIES:  # someone wrote in between: read again
                continue
            raise WarmcastError(f"deployment/{scaler.name}: patching the pod template failed: {err.status} "
                                f"{err.reason}") from None
        return {"profile": profile, "previous": current, "patched": True, "attempts": attempt + 1,
                "max_surge": max_surge, "replicas_before": int(obj.spec.replicas or 0),
                "replicas": int(obj.spec.replicas or 0) if replicas is None else int(replicas)}
    raise WarmcastError(f"deployment/{scaler.name}: still conflicting after {RETRIES} attempts")


def ready_by_profile(scaler: Any) -> dict[str, int]:
    """Ready pods per profile during a rollout: updated pods run the new profile (the template's),
    the rest the previous one.  A surge-only rollout keeps every old pod ready until it goes."""
    obj = scaler.workload()
    notes: Mapping[str, str] = obj.metadata.annotations or {}
    first = scaler.default_profile   # a workload warmcast never rolled runs the default profile
    new = notes.get(f"{scaler.prefix}/profile") or first
    old = notes.get(f"{scaler.prefix}/previous-profile") or first
    st = obj.status
    ready, total = int(st.ready_replicas or 0), int(st.replicas or 0)
    updated = int(st.updated_replicas or 0)
    on_new = max(0, min(updated, ready - (total - updated)))
    out = {new: on_new}
    if old and old != new:
        out[old] = ready - on_new
    return out
