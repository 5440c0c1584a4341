"""A switch's canary shifted by weight on a Gateway API HTTPRoute (issue 42), and the audit's words.

NO Kubernetes cluster can run on this machine, so this is a FAKE TRANSPORT: the official ``kubernetes``
client (custom objects API: URL building, content type, serialisation) talks to an in-memory API server
that keeps one HTTPRoute, applies merge patches as a server does (a list is replaced whole), bumps
``metadata.resourceVersion`` on each write and refuses a patch carrying a stale one with 409.
"""
from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from test_scalers import FakeK8sApi, _FakeResponse
from warmcast.config.deployments import RouteSpec
from warmcast.errors import WarmcastError
from warmup.actuators.scalers import KubernetesProfileScaler
from warmup.core import SwitchConfig
from warmup.core.state import SwitchPhase, SwitchState
from warmup.core.switch_capacity import route_weights

ROUTE_PATH = "apis/gateway.networking.k8s.io/v1/namespaces/serving/httproutes/chat"


class RouteApi(FakeK8sApi):
    """The fake apps/v1 server plus one HTTPRoute."""

    def __init__(self, api: k8s.ApiClient) -> None:
        super().__init__(api)
        self.route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                      "metadata": {"name": "chat", "namespace": "serving", "resourceVersion": "1"},
                      "spec": {"parentRefs": [{"name": "gw"}], "rules": [
                          {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                           "backendRefs": [{"name": "chat-day", "port": 8000, "weight": 100},
                                           {"name": "chat-night", "port": 8000, "weight": 0}]}]}}
        self.race_next = False

    def request(self, method, url, query_params=None, headers=None, body=None, **kw):
        path = url.split("://", 1)[1].split("/", 1)[1]
        if not path.startswith("apis/gateway.networking.k8s.io/"):
            return super().request(method, url, query_params, headers, body, **kw)
        assert path == ROUTE_PATH, path
        self.requests.append((method, path, (headers or {}).get("Content-Type"), body))
        if method == "PATCH":
            assert headers["Content-Type"] == "application/merge-patch+json"
            if self.race_next or body["metadata"]["resourceVersion"] != self.route["metadata"]["resourceVersion"]:
                raise ApiException(http_resp=_FakeResponse(409, {"kind": "Status", "code": 409, "reason": "Conflict"}))
            self.route["spec"] = {**self.route["spec"], **body["spec"]}     # a merge patch replaces a list whole
            self.route["metadata"]["resourceVersion"] = str(int(self.route["metadata"]["resourceVersion"]) + 1)
        return _FakeResponse(200, json.loads(json.dumps(self.route)))


@pytest.fixture()
def scaler():
    api = k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid"))
    fake = RouteApi(api)
    api.rest_client = fake
    for name in ("chat-day", "chat-night"):
        fake.add("deployments", "serving", name, replicas=2)
    route = RouteSpec(httproute="chat", backends={"day": "chat-day", "night": "chat-night"})
    s = KubernetesProfileScaler("chat", {"day": "deployment/chat-day", "night": "deployment/chat-night"}, "serving",
                                api_client=api, route=route)
    return s, fake


def test_the_canary_weight_is_set_on_every_backendref_and_the_rest_of_the_route_is_kept(scaler) -> None:
    s, fake = scaler
    cfg = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", 300.0), ("night", 180.0)),
                       canary_share=0.1, routing="weights")
    canary = SwitchState(phase=SwitchPhase.CANARY, active_profile="day", target_profile="night")
    out = s.set_weights(route_weights(cfg, canary, {"day": 2, "night": 1}))
    assert out == {"before": {"day": 100, "night": 0}, "weights": {"day": 90, "night": 10}}
    assert s.route.weights() == {"day": 90, "night": 10}
    rule = fake.route["spec"]["rules"][0]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v1"}}]          # kept
    assert [r["port"] for r in rule["backendRefs"]] == [8000, 8000]
    assert fake.route["spec"]["parentRefs"] == [{"name": "gw"}]
    settle = SwitchState(phase=SwitchPhase.SETTLE, active_profile="day", target_profile="night")
    s.set_weights(route_weights(cfg, settle, {"day": 0, "night": 3}))
    assert s.route.weights() == {"day": 0, "night": 100}


def test_a_concurrent_change_is_refused_not_overwritten(scaler) -> None:
    s, fake = scaler
    fake.race_next = True
    with pytest.raises(ApiException) as err:
        s.set_weights({"day": 90, "night": 10})
    assert err.value.status == 409
    assert s.route.weights() == {"day": 100, "night": 0}


def test_a_route_without_the_profiles_service_and_a_scaler_without_a_route_say_what_to_fix(scaler) -> None:
    s, fake = scaler
    fake.route["spec"]["rules"][0]["backendRefs"].pop()
    with pytest.raises(WarmcastError, match="no backendRef for Service"):
        s.set_weights({"day": 90, "night": 10})
    bare = KubernetesProfileScaler("chat", {"day": "deployment/chat-day", "night": "deployment/chat-night"},
                                   "serving", api_client=s.parts["day"].apps.api_client)
    with pytest.raises(WarmcastError, match="set route.httproute"):
        bare.set_weights({"day": 90, "night": 10})


def test_the_apply_step_says_the_weights_it_set() -> None:
    from warmup.core import SwitchAction, SwitchDecision
    from warmup.core.reasons import Reason, ReasonCode
    from workers.apply import route_weights as applied

    dec = SwitchDecision(SwitchAction.MOVE_CANARY, Reason(ReasonCode.SWITCH_CANARY, "x"), SwitchPhase.CANARY,
                         "day", "night", 0.1, 1, (("day", 2), ("night", 1)), weights=(("day", 90), ("night", 10)))

    class NoRoute:
        pass

    assert applied(NoRoute(), dec) == "; route weights day 90, night 10 not set: this backend has no weighted route"
