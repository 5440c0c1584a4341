"""The official Kubernetes client against an in-memory apps/v1 API (no cluster runs here): a fake
transport behind the client's own REST layer that keeps Deployments and StatefulSets, answers their
scale subresource and applies merge patches as the API server does.  Shared by the scaler tests and
the fleet tick's balloon test."""
from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException


class _FakeResponse:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = "OK" if status < 400 else "Error"
        self.data = json.dumps(body).encode()

    def getheaders(self) -> dict[str, str]:
        return {"content-type": "application/json"}

    def getheader(self, name: str, default: Any = None) -> Any:
        return self.getheaders().get(name.lower(), default)


class FakeK8sApi:
    """An in-memory apps/v1 API for Deployments and StatefulSets (scale subresource + merge patches)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api
        self.objects: dict[tuple[str, str, str], Any] = {}
        self.requests: list[tuple[str, str, str | None, Any]] = []

    def add(self, kind: str, ns: str, name: str, replicas: int) -> None:
        meta = k8s.V1ObjectMeta(name=name, namespace=ns, annotations={"team": "ml"})
        selector = k8s.V1LabelSelector(match_labels={"app": name})
        template = k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels={"app": name}),
                                         spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="vllm", image="vllm")]))
        if kind == "deployments":
            obj = k8s.V1Deployment(metadata=meta, spec=k8s.V1DeploymentSpec(
                replicas=replicas, selector=selector, template=template))
        else:
            obj = k8s.V1StatefulSet(metadata=meta, spec=k8s.V1StatefulSetSpec(
                replicas=replicas, selector=selector, template=template, service_name=name))
        self.objects[(kind, ns, name)] = obj

    def _deser(self, data: Any, klass: str) -> Any:
        return self.api._ApiClient__deserialize(data, klass)  # the client's own model deserialiser

    def request(self, method, url, query_params=None, headers=None, body=None, post_params=None,
                _preload_content=True, _request_timeout=None):
        path = url.split("://", 1)[1].split("/", 1)[1]
        parts = path.split("/")  # apis/apps/v1/namespaces/NS/KIND/NAME[/scale]
        assert parts[:3] == ["apis", "apps", "v1"], path
        ns, kind, name = parts[4], parts[5], parts[6]
        sub = parts[7] if len(parts) > 7 else None
        ctype = (headers or {}).get("Content-Type")
        self.requests.append((method, path, ctype, body))
        obj = self.objects.get((kind, ns, name))
        if obj is None:
            resp = _FakeResponse(404, {"kind": "Status", "code": 404, "message": f'{kind} "{name}" not found'})
            raise ApiException(http_resp=resp)
        if method == "PATCH":
            assert ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"), ctype
            if sub == "scale":
                patch = self._deser(body, "V1Scale")  # the body must be a valid (partial) Scale
                obj.spec.replicas = patch.spec.replicas
            else:
                klass = "V1Deployment" if kind == "deployments" else "V1StatefulSet"
                patch = self._deser(body, klass)
                obj.metadata.annotations = {**(obj.metadata.annotations or {}), **(patch.metadata.annotations or {})}
        if sub == "scale":
            out = k8s.V1Scale(api_version="autoscaling/v1", kind="Scale",
                              metadata=k8s.V1ObjectMeta(name=name, namespace=ns),
                              spec=k8s.V1ScaleSpec(replicas=obj.spec.replicas),
                              status=k8s.V1ScaleStatus(replicas=obj.spec.replicas, selector=f"app={name}"))
        else:
            out = obj
        return _FakeResponse(200, self.api.sanitize_for_serialization(out))

    def __getattr__(self, verb: str):  # RESTClientObject.GET/PATCH/... delegate to request()
        if verb in ("GET", "PATCH", "PUT", "POST", "DELETE"):
            return lambda url, **kw: self.request(verb, url, **kw)
        raise AttributeError(verb)
