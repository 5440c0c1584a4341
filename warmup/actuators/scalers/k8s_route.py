"""A weighted route for profile switches: the backendRefs weights of a Gateway API HTTPRoute.

As Argo Rollouts and Flagger shift a canary, the switch's canary gets its share of requests by
weight, whatever its replica count (round robin over a Service would give one canary replica of two
half the requests).  Each profile's pods sit behind their own Service (``route.backends``); every
rule's backendRef naming one of those Services gets that profile's weight.  The route is read,
its rules rewritten and written back as a merge patch (a merge patch replaces a list whole, so the
rules go back complete), guarded by the object's resourceVersion: a concurrent writer's change is
refused (409), not overwritten.  Official client, custom objects API.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from warmcast.errors import InputError, WarmcastError

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"
MERGE = "application/merge-patch+json"


class HTTPRouteWeights:
    def __init__(self, name: str, namespace: str, backends: Mapping[str, str], api_client: Any) -> None:
        from kubernetes import client

        self.name, self.namespace, self.backends = name, namespace, dict(backends)
        self.api = client.CustomObjectsApi(api_client)

    def _get(self) -> dict[str, Any]:
        return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)

    def weights(self) -> dict[str, int]:
        """Each profile's weight as the route holds it now (its first backendRef's)."""
        by_service = {}
        for rule in self._get().get("spec", {}).get("rules", []):
            for ref in rule.get("backendRefs", []):
                by_service.setdefault(ref.get("name"), int(ref.get("weight", 1)))
        return {p: by_service[s] for p, s in self.backends.items() if s in by_service}

    def set_weights(self, want: Mapping[str, int]) -> dict[str, Any]:
        """Set each profile's weight on every backendRef naming its Service; what was there before."""
        unknown = sorted(set(want) - set(self.backends))
        if unknown:
            raise InputError(f"route {self.name}: no backend for profile(s) {unknown}; backends: {sorted(self.backends)}")
        obj = self._get()
        rules = copy.deepcopy(obj.get("spec", {}).get("rules", []))
        service_weight = {self.backends[p]: int(w) for p, w in want.items()}
        found = {ref.get("name") for rule in rules for ref in rule.get("backendRefs", [])}
        missing = sorted(set(service_weight) - found)
        if missing:
            raise WarmcastError(f"HTTPRoute {self.namespace}/{self.name} has no backendRef for Service(s) {missing}")
        before = self.weights()
        for rule in rules:
            for ref in rule.get("backendRefs", []):
                if ref.get("name") in service_weight:
                    ref["weight"] = service_weight[ref["name"]]
        body = {"metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")}, "spec": {"rules": rules}}
        self.api.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, body,
                                                _content_type=MERGE)
        return {"before": before, "weights": {p: int(w) for p, w in want.items()}}
