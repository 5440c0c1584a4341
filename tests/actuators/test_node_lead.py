"""A node pool's lead measured from its node objects replaces the declared one (issue 45).

No Kubernetes cluster runs here: the official client talks to an in-memory core/v1 API through its
own REST layer (a fake transport that answers ``GET /api/v1/nodes?labelSelector=...`` with real
V1NodeList JSON, filtered by the selector as the API server does)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlparse

from kubernetes import client as k8s

from warmup.actuators.nodes import created_to_ready_s, node_lead
from warmup.core.lead import NODE_FILE, NODE_MEASURED

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)


class _Resp:
    def __init__(self, body) -> None:
        self.status, self.reason, self.data = 200, "OK", json.dumps(body).encode()

    def getheaders(self):
        return {"content-type": "application/json"}

    def getheader(self, name, default=None):
        return self.getheaders().get(name.lower(), default)


class FakeNodes:
    def __init__(self, api: k8s.ApiClient, nodes: list[k8s.V1Node]) -> None:
        self.api, self.nodes, self.selectors = api, nodes, []

    def request(self, method, url, query_params=None, **_):
        parsed = urlparse(url)
        assert method == "GET" and parsed.path.endswith("/api/v1/nodes"), url
        q = dict(query_params or []) or {k: v[0] for k, v in parse_qs(parsed.query).items()}
        key, _, value = q.get("labelSelector", "").partition("=")
        self.selectors.append(q.get("labelSelector"))
        items = [n for n in self.nodes if not key or (n.metadata.labels or {}).get(key) == value]
        return _Resp(self.api.sanitize_for_serialization(k8s.V1NodeList(items=items)))

    def __getattr__(self, verb):
        if verb == "GET":
            return lambda url, **kw: self.request("GET", url, **kw)
        raise AttributeError(verb)


def node(name: str, pool: str, created: datetime, ready_after_s: float | None, status: str = "True") -> k8s.V1Node:
    conds = [] if ready_after_s is None else [k8s.V1NodeCondition(
        type="Ready", status=status, last_transition_time=created + timedelta(seconds=ready_after_s))]
    return k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"pool": pool}, creation_timestamp=created),
                      status=k8s.V1NodeStatus(conditions=conds))


def api_with(nodes):
    api = k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid"))
    api.rest_client = FakeNodes(api, nodes)
    return api


def test_a_lead_measured_from_node_objects_replaces_the_declared_one():
    nodes = [node(f"a{i}", "a100", T0 + timedelta(hours=i), 420 + 30 * i) for i in range(5)]
    nodes += [node("h0", "h100", T0, 60), node("a-boot", "a100", T0, None), node("a-bad", "a100", T0, 900, "False")]
    api = api_with(nodes)
    lead = node_lead(api, "pool=a100", declared_min=10.0)
    assert lead.source == NODE_MEASURED and "5 nodes" in lead.detail
    assert 8.0 < lead.cold_start_min < 9.0                   # P90 of 7.0 .. 9.0 min, not the declared 10
    assert api.rest_client.selectors == ["pool=a100"]


def test_without_ready_nodes_the_declared_lead_stands_and_says_so():
    lead = node_lead(api_with([node("a-boot", "a100", T0, None)]), "pool=a100", declared_min=10.0)
    assert (lead.cold_start_min, lead.source) == (10.0, NODE_FILE)


def test_a_node_ready_before_its_creation_is_left_out():
    assert created_to_ready_s([node("skew", "a100", T0, -30), node("ok", "a100", T0, 300)]) == [300.0]
