"""Scaler backends without a cluster: webhook against a real local HTTP server, dry-run,
and Kubernetes against the official client's models through a fake transport.

NO Kubernetes cluster runs on this machine.  The Kubernetes test therefore swaps
the ApiClient's REST layer for an in-memory fake API server (the one mock in this
suite, for the one thing no machine here can run).  Everything above the socket is
the real ``kubernetes`` client: URL building, content-type selection, request
serialisation of the patch body, and deserialisation of responses into
``V1Scale`` / ``V1Deployment`` models.  The fake answers with objects serialised
from the client's own models and checks each request body deserialises into the
model the API schema expects.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s

from warmcast.config.deployments import Deployment, Profile, ScalerSpec
from warmcast.errors import InputError
from fakek8s import FakeK8sApi, _FakeResponse  # noqa: F401 - the route and switch tests import them from here
from warmup.actuators.local import free_port
from warmup.actuators.scalers import (
    DryRunScaler,
    KubernetesProfileScaler,
    KubernetesScaler,
    LocalProcessScaler,
    WebhookScaler,
    scaler_for,
)

# -- webhook: a real HTTP server on loopback --------------------------------------------


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    fail_first: int = 0
    answer: dict[str, Any] | None = None

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append({"body": body, "auth": self.headers.get("Authorization")})
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_response(503)
            self.end_headers()
            return
        payload = json.dumps(type(self).answer or {"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def hook_server():
    _Hook.received, _Hook.fail_first, _Hook.answer = [], 0, None
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/scale"
    srv.shutdown()
    srv.server_close()


def test_webhook_posts_target_json_with_token_and_retries(hook_server):
    _Hook.fail_first = 1
    s = WebhookScaler("chat", hook_server, token="s3cret", backoff_s=0.01)
    r = s.scale_to(3, "forecast p90 1200 rpm needs 3", forecast={"p90": 1200})
    assert r.applied and r.changed and r.error is None and r.previous == 0 and r.target == 3
    assert len(_Hook.received) == 2  # one 503, then accepted
    sent = _Hook.received[-1]
    assert sent["auth"] == "Bearer s3cret"
    assert sent["body"]["deployment"] == "chat" and sent["body"]["replicas"] == 3
    assert sent["body"]["reason"].startswith("forecast") and sent["body"]["forecast"] == {"p90": 1200}
    assert s.current() == 3
    # Idempotent: the same target again sends the same absolute number.
    r2 = s.scale_to(3, "unchanged")
    assert r2.applied and not r2.changed and _Hook.received[-1]["body"]["replicas"] == 3
    # The autoscaler may answer the replicas it really set.
    _Hook.answer = {"replicas": 2}
    s.scale_to(5, "up")
    assert s.current() == 2
    s.close()


def test_webhook_failure_is_reported_not_raised(hook_server):
    _Hook.fail_first = 10
    s = WebhookScaler("chat", hook_server, retries=2, backoff_s=0.01)
    r = s.scale_to(4, "up")
    assert not r.applied and "503" in r.error and "chat" in r.error
    dead = WebhookScaler("chat", "http://127.0.0.1:9/none", retries=1)
    r = dead.scale_to(1, "x")
    assert not r.applied and "ConnectError" in r.error
    with pytest.raises(InputError):
        s.scale_to(-1, "negative")
    with pytest.raises(InputError):
        s.scale_to(1, "")


def test_dry_run_records_only():
    s = DryRunScaler("chat", initial=2)
    r = s.scale_to(5, "forecast says so", forecast={"p50": 3})
    assert not r.applied and r.target == 5 and r.previous == 2
    assert s.current() == 5 and len(s.history) == 1 and s.history[0].detail["forecast"] == {"p50": 3}


# -- kubernetes: real client, fake transport --------------------------------------------


@pytest.fixture()
def fake_k8s():
    api = k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid"))
    fake = FakeK8sApi(api)
    api.rest_client = fake
    return api, fake


@pytest.mark.parametrize("kind,resource", [("deployments", "deployment/vllm-chat"),
                                           ("statefulsets", "statefulset/vllm-chat")])
def test_kubernetes_scale_subresource_and_annotations(fake_k8s, kind, resource):
    api, fake = fake_k8s
    fake.add(kind, "serving", "vllm-chat", replicas=2)
    s = KubernetesScaler("chat", resource, "serving", api_client=api)
    assert s.current() == 2
    r = s.scale_to(5, "forecast p90 2400 rpm at 14:05 needs 5", forecast={"p90_rpm": 2400, "lead_min": 15})
    assert r.applied and r.changed and r.previous == 2 and r.target == 5, r
    assert r.detail["spec_replicas"] == 5 and r.detail["resource"] == resource
    assert s.current() == 5
    ann = s.annotations()
    assert ann["team"] == "ml"  # existing annotations kept (merge patch)
    assert ann["warmcast.io/reason"].startswith("forecast p90")
    assert ann["warmcast.io/target-replicas"] == "5"
    assert json.loads(ann["warmcast.io/forecast"]) == {"p90_rpm": 2400, "lead_min": 15}
    patches = [(p, b) for m, p, _, b in fake.requests if m == "PATCH"]
    assert patches[0][0].endswith(f"/{kind}/vllm-chat/scale") and patches[0][1] == {"spec": {"replicas": 5}}
    # Idempotent: the same target again is an absolute set, not an increment.
    r2 = s.scale_to(5, "unchanged")
    assert r2.applied and not r2.changed and s.current() == 5


def test_kubernetes_missing_workload_reported(fake_k8s):
    api, _ = fake_k8s
    s = KubernetesScaler("chat", "deployment/absent", "serving", api_client=api)
    r = s.scale_to(1, "x")
    assert not r.applied and "404" in r.error and "chat" in r.error
    with pytest.raises(InputError):
        KubernetesScaler("chat", "pod/x", api_client=api)


def test_scaler_for_picks_backend(tmp_path):
    base = dict(name="chat", profiles={"day": Profile(capacity_rpm=100, engine_args={"max-num-seqs": 4})})
    assert isinstance(scaler_for(Deployment(**base)), DryRunScaler)
    hook = Deployment(**base, scaler=ScalerSpec(kind="webhook", url="http://127.0.0.1:9/x"))
    assert isinstance(scaler_for(hook), WebhookScaler)
    assert isinstance(scaler_for(hook, dry_run=True), DryRunScaler)
    local_dep = Deployment(**base, scaler=ScalerSpec(kind="local", base_port=8700))
    local = scaler_for(local_dep, state_dir=tmp_path)
    assert isinstance(local, LocalProcessScaler) and local.current() == 0
    assert local.engine_args["max-num-seqs"] == 4 and local.engine_args["load-format"] == "dummy"
    assert scaler_for(local_dep, state_dir=tmp_path) is local  # one scaler (and its processes) per deployment
    assert local.state_file == tmp_path / "local-scaler" / "chat.json" and not local.stop_at_exit


def test_local_scaler_profile_errors_name_the_problem(tmp_path):
    profiles = {"day": {"block-size": 32}, "night": {"block-size": 64}}
    s = LocalProcessScaler("d", tmp_path, profiles=profiles, profile="day", state_file=tmp_path / "s.json")
    assert s.engine_args == {"block-size": 32} and s.profile_of() == {}
    with pytest.raises(InputError, match=r"no profile 'dusk'.*\['day', 'night'\]"):
        s.set_replicas({"dusk": 1})
    with pytest.raises(InputError, match="no profile 'dusk'"):
        s.set_replicas({"day": 0}, active="dusk")
    with pytest.raises(InputError, match="engine_args or profiles"):
        LocalProcessScaler("d", tmp_path, {"block-size": 32}, profiles=profiles)
    # No servers: the active profile is what new servers get, kept in the state file.
    assert s.set_replicas({"night": 0}, active="night")["replicas"] == {"day": 0, "night": 0}
    assert s.engine_args == {"block-size": 64}
    again = LocalProcessScaler("d", tmp_path, profiles=profiles, profile="day", state_file=tmp_path / "s.json")
    assert again.profile == "night"


def test_kubernetes_profile_workloads_prewarm_canary_all_and_rollback(fake_k8s):
    # One Deployment per profile on the fake API server (no cluster here: see the module docstring).
    api, fake = fake_k8s
    fake.add("deployments", "serving", "chat-day", replicas=4)
    fake.add("deployments", "serving", "chat-night", replicas=0)
    s = KubernetesProfileScaler("chat", {"day": "deployment/chat-day", "night": "deployment/chat-night"},
                                "serving", api_client=api)
    assert s.current() == 4 and s.profile_of() == {}
    assert s.set_replicas({"night": 1}, "pre-warm")["replicas"] == {"day": 4, "night": 1}
    out = s.set_replicas({"day": 0, "night": 5}, "move all")  # night up first, then day down
    assert out["replicas"] == {"day": 0, "night": 5}
    patches = [(p.rsplit("/", 2)[-2], b["spec"]["replicas"]) for m, p, _, b in fake.requests
               if m == "PATCH" and p.endswith("/scale")]
    assert patches[-2:] == [("chat-night", 5), ("chat-day", 0)]
    # The planner scales the serving profile; in, it drops the others first.
    assert s.scale_to(7, "forecast").detail["replicas"] == {"day": 0, "night": 7}
    assert s.set_replicas({"day": 7, "night": 0}, "rollback")["replicas"] == {"day": 7, "night": 0}
    s.set_replicas({"night": 2}, "pre-warm")
    assert s.scale_to(8, "less demand").detail["replicas"] == {"day": 7, "night": 1}
    with pytest.raises(InputError, match="no profile 'dusk'"):
        s.set_replicas({"dusk": 1}, "typo")


def test_profile_resources_must_match_the_profiles():
    base = dict(name="chat", profiles={"day": Profile(capacity_rpm=100), "night": Profile(capacity_rpm=80)})
    with pytest.raises(ValueError, match="exactly the profiles"):
        Deployment(**base, scaler=ScalerSpec(kind="kubernetes", profile_resources={"day": "deployment/a"}))
    with pytest.raises(ValueError, match="deployment/NAME"):
        ScalerSpec(kind="kubernetes", profile_resources={"day": "pod/a"})
    dep = Deployment(**base, scaler=ScalerSpec(kind="kubernetes", profile_resources={
        "day": "deployment/a", "night": "statefulset/b"}))
    assert dep.scaler.resource is None


def test_local_scaler_never_binds_two_servers_to_one_core(tmp_path):
    """A server started after another stopped takes the freed core, also when each step is done by
    a scaler built afresh from the state file, as the loop does.  (Slots were once the index in the
    file: after a move stopped the first server, the rollback's new server landed on the core of
    the loaded one, whose spinning OpenMP threads kept it from booting for ten minutes.)  The
    "python" here is a shell script that sleeps with a vLLM-like command line: no vLLM needed."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nsleep 300\n')
    fake.chmod(0o755)
    profiles = {"day": {"block-size": 32}, "night": {"block-size": 64}}

    def scaler() -> LocalProcessScaler:
        return LocalProcessScaler("d", tmp_path, profiles=profiles, profile="day", python=fake, base_port=free_port(),
                                  state_file=tmp_path / "s.json", log_dir=tmp_path / "logs")

    def slots() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for e in json.loads((tmp_path / "s.json").read_text())["servers"]:
            out.setdefault(e["profile"], []).append(e["slot"])
        return out

    try:
        scaler().scale_to(1, "one day server")
        scaler().set_replicas({"night": 1})
        assert slots() == {"day": [0], "night": [1]}
        scaler().set_replicas({"day": 0, "night": 1})   # the move: day stops
        scaler().set_replicas({"day": 1, "night": 1})   # a rollback starts day again
        assert slots() == {"night": [1], "day": [0]}
    finally:
        scaler().close()


def test_other_cores_leave_the_engine_its_cores_also_where_the_operator_binds_them(monkeypatch):
    """The cores a measurement's client and the server's front end keep to are the ones the engine's
    OpenMP threads do not bind: one_core_env's core, or the operator's own binding, which one_core_env
    keeps (pinning them onto an operator-bound core would put them back on the engine's)."""
    from warmup.actuators.local import one_core_env, other_cores

    cores = [0, 1, 2, 3]   # given, not this process's: a CI phase runs pinned to one core
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert one_core_env(5, cores=cores) == {"VLLM_CPU_OMP_THREADS_BIND": "1"}   # slot mod the cores
    assert other_cores(0, cores=cores) == {1, 2, 3}
    assert other_cores(0, cores=[0]) is None   # one core: nowhere else to go
    mine = {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert one_core_env(0, mine, cores) == mine and other_cores(0, mine, cores) == {0, 2, 3}
    assert other_cores(0, {"VLLM_CPU_OMP_THREADS_BIND": "0,2"}, cores) == {1, 3}
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1-2")   # the operator's, in the environment
    assert other_cores(0, cores=cores) == {0, 3}
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-3")   # every core: none left over
    assert other_cores(0, cores=cores) is None
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")   # vLLM chooses: nothing known to keep off
    assert other_cores(0, cores=cores) is None
