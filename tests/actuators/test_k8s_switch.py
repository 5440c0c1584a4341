"""Profile switches on Kubernetes that never lose ready capacity, and launch-to-ready from its launches
(into the lead, through the signals step).

NO Kubernetes cluster can run on this machine, so this is a FAKE TRANSPORT: the official
``kubernetes`` client (URL building, content types, serialisation into its models) talks to
an in-memory API server (:class:`LaggingK8sApi`, built on the fake of test_scalers.py) that
behaves where it matters here the way a cluster does and the plain fake does not:

- a pod becomes ready one cold start after it is created (``status.readyReplicas`` lags
  ``spec.replicas``), and scale-in removes unready pods first;
- a Deployment's template change rolls out under its strategy: at most ``replicas + maxSurge``
  pods, and old pods go only while ``ready >= replicas - maxUnavailable``;
- every write bumps ``metadata.resourceVersion``, and a patch carrying a stale one gets 409.

The switch itself is the real core (``decide_switch``) and the real scalers each simulated minute.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from datetime import datetime, time as dtime, timedelta, timezone

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from test_scalers import FakeK8sApi, _FakeResponse
from warmcast.errors import WarmcastError
from warmup.actuators.launch import container_args
from warmup.actuators.scalers import KubernetesProfileScaler, KubernetesScaler
from warmup.core import ScheduleWindow, SwitchConfig, SwitchPhase, SwitchState, decide_switch
from workers.apply import roll

COLD_S = 5 * 60.0
CFG = SwitchConfig(enabled=True, default_profile="day", profile_capacity=(("day", 300.0), ("night", 200.0)),
                   windows=(ScheduleWindow("night", dtime(22, 0), dtime(7, 0)),), prewarm_min=5.0, hold_min=10.0,
                   settle_min=10.0)


class LaggingK8sApi(FakeK8sApi):
    """The fake API server with pods that take a cold start to be ready, rollouts and 409s."""

    def __init__(self, api: k8s.ApiClient, now: float) -> None:
        super().__init__(api)
        self.now = now
        self.pods: dict[str, list[dict]] = {}     # workload name -> pods {ready_at, template}
        self.rv: dict[str, int] = {}
        self.race_next = False                    # a concurrent writer bumps the version before a patch
        self.cold_s = COLD_S

    def add(self, kind: str, ns: str, name: str, replicas: int) -> None:
        super().add(kind, ns, name, replicas)
        self.pods[name] = [{"ready_at": 0.0, "template": "t0"} for _ in range(replicas)]
        self.rv[name] = 1

    def ready(self, name: str) -> int:
        return sum(1 for p in self.pods[name] if p["ready_at"] <= self.now)

    def ready_by_template(self, name: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods[name]:
            if p["ready_at"] <= self.now:
                out[p["template"]] = out.get(p["template"], 0) + 1
        return out

    def _reconcile(self, kind: str, name: str) -> None:
        """The workload controller: create, delete and roll pods toward the spec."""
        obj, pods = self.objects[(kind, "serving", name)], self.pods[name]
        want, tpl = int(obj.spec.replicas or 0), (obj.metadata.annotations or {}).get("tpl", "t0")
        surge, unavail = self._strategy(obj, want)
        new = [p for p in pods if p["template"] == tpl]
        while len(pods) < want + surge and len(new) < want:
            pod = {"ready_at": self.now + self.cold_s, "template": tpl}
            pods.append(pod)
            new.append(pod)
        old = [p for p in pods if p["template"] != tpl]
        for p in sorted(old, key=lambda p: p["ready_at"] <= self.now):  # unready old pods first
            if self.ready(name) - (p["ready_at"] <= self.now) >= want - unavail or p["ready_at"] > self.now:
                pods.remove(p)
        extra = len([p for p in pods if p["template"] == tpl]) - want
        for p in sorted(new, key=lambda p: -p["ready_at"])[:max(0, extra)]:  # scale-in: unready first
            pods.remove(p)
        ready, updated = self.ready(name), len([p for p in pods if p["template"] == tpl])
        obj.status = (k8s.V1DeploymentStatus if kind == "deployments" else k8s.V1StatefulSetStatus)(
            replicas=len(pods), ready_replicas=ready, updated_replicas=updated)

    @staticmethod
    def _strategy(obj, want: int) -> tuple[int, int]:
        ru = getattr(getattr(obj.spec, "strategy", None), "rolling_update", None)
        if ru is None:
            return int(math.ceil(0.25 * want)), int(math.floor(0.25 * want))  # the Deployment defaults
        pct = lambda v, up: int((math.ceil if up else math.floor)(want * int(str(v)[:-1]) / 100)) \
            if str(v).endswith("%") else int(v)  # noqa: E731
        return pct(ru.max_surge, True), pct(ru.max_unavailable, False)

    def request(self, method, url, query_params=None, headers=None, body=None, **kw):
        path = url.split("://", 1)[1].split("/", 1)[1].split("/")
        kind, name, sub = path[5], path[6], (path[7] if len(path) > 7 else None)
        obj = self.objects.get((kind, "serving", name))
        if obj is None:
            return super().request(method, url, query_params, headers, body, **kw)   # 404
        self._reconcile(kind, name)
        if method == "PATCH":
            template = sub is None and "template" in ((body or {}).get("spec") or {})
            if self.race_next and template:
                self.race_next, self.rv[name] = False, self.rv[name] + 1
            sent = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if sent is not None and str(sent) != str(self.rv[name]):
                raise ApiException(http_resp=_FakeResponse(409, {"kind": "Status", "code": 409,
                                                                 "reason": "Conflict"}))
            if template:
                self.requests.append((method, "/".join(path), (headers or {}).get("Content-Type"), body))
                self._template_patch(obj, body)
            else:
                super().request(method, url, query_params, headers, body, **kw)
            self.rv[name] += 1
            self._reconcile(kind, name)
        obj.metadata.resource_version = str(self.rv[name])
        if sub is None:
            return _FakeResponse(200, self.api.sanitize_for_serialization(obj))
        scale = k8s.V1Scale(api_version="autoscaling/v1", kind="Scale", metadata=k8s.V1ObjectMeta(name=name),
                            spec=k8s.V1ScaleSpec(replicas=obj.spec.replicas),
                            status=k8s.V1ScaleStatus(replicas=obj.status.replicas, selector=f"app={name}"))
        return _FakeResponse(200, self.api.sanitize_for_serialization(scale))

    def _template_patch(self, obj, body) -> None:
        """A strategic merge of the strategy, the replicas, the annotations and the first container's args."""
        assert body["spec"]["template"]["spec"]["containers"][0]["name"] == "vllm"
        tpl = self._deser(body["spec"]["template"], "V1PodTemplateSpec")   # must be a valid template
        obj.spec.strategy = self._deser(body["spec"]["strategy"], "V1DeploymentStrategy")
        if "replicas" in body["spec"]:
            obj.spec.replicas = int(body["spec"]["replicas"])
        args = tpl.spec.containers[0].args
        obj.spec.template.spec.containers[0].args = args
        notes = (body.get("metadata") or {}).get("annotations") or {}
        obj.metadata.annotations = {**(obj.metadata.annotations or {}), **notes, "tpl": " ".join(args)}


@pytest.fixture()
def lagging():
    api = k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid"))
    fake = LaggingK8sApi(api, time.time())
    api.rest_client = fake
    return api, fake


def at(minute: int) -> datetime:
    """Minutes after 21:50 UTC (the night window opens at 22:00)."""
    return datetime(2024, 5, 17, 21, 50, tzinfo=timezone.utc) + timedelta(minutes=minute)


@pytest.mark.parametrize("cold_min", [5, 25])
def test_per_profile_workloads_switch_day_to_night_without_a_dip_in_ready_capacity(lagging, cold_min):
    # 5: the pre-warm lead was the real cold start; 25: pods boot far slower than the lead said, so the
    # canary and the move start before night is ready and day must stay until it is.
    api, fake = lagging
    fake.cold_s = cold_min * 60.0
    cfg = replace(CFG, max_prewarm_wait_min=0.0)
    fake.add("deployments", "serving", "chat-day", replicas=4)
    fake.add("deployments", "serving", "chat-night", replicas=0)
    s = KubernetesProfileScaler("chat", {"day": "deployment/chat-day", "night": "deployment/chat-night"},
                                "serving", api_client=api)
    need = 4 * 300.0
    st, seen, lowest = SwitchState(), [], math.inf
    for minute in range(0, 70):
        fake.now += 60
        ready = s.ready_by_profile()
        assert ready == {"day": fake.ready("chat-day"), "night": fake.ready("chat-night")}  # readyReplicas
        d, st, _ = decide_switch(cfg, at(minute), (), 1.0, None, st, s.current(), "day", ready=ready)
        if d.replicas:
            s.set_replicas(dict(d.replicas), d.reason.text)
        capacity = fake.ready("chat-day") * 300 + fake.ready("chat-night") * 200
        lowest = min(lowest, capacity)
        seen.append(st.phase)
    assert lowest >= need, f"ready capacity dipped to {lowest} req/min (need {need})"
    assert {SwitchPhase.PREWARM, SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.SETTLE} <= set(seen)
    assert st.phase is SwitchPhase.STEADY and st.active_profile == "night"
    assert s.replicas() == {"day": 0, "night": 6} and fake.ready("chat-night") == 6


def test_rollback_restores_day_before_night_goes(lagging):
    api, fake = lagging
    fake.add("deployments", "serving", "chat-day", replicas=4)
    fake.add("deployments", "serving", "chat-night", replicas=0)
    s = KubernetesProfileScaler("chat", {"day": "deployment/chat-day", "night": "deployment/chat-night"},
                                "serving", api_client=api)
    st, lowest = SwitchState(), math.inf
    for minute in range(0, 50):
        fake.now += 60
        p99 = 5.0 if st.phase is SwitchPhase.MOVE else 1.0   # the breaker trips during the move
        d, st, _ = decide_switch(CFG, at(minute), (), p99, None, st, s.current(), "day", ready=s.ready_by_profile())
        if d.replicas:
            s.set_replicas(dict(d.replicas), d.reason.text)
        lowest = min(lowest, fake.ready("chat-day") * 300 + fake.ready("chat-night") * 200)
    assert lowest >= 1200
    assert st.phase is SwitchPhase.PAUSED and st.active_profile == "day" and st.blocked_profile == "night"
    assert s.replicas() == {"day": 4, "night": 0} and fake.ready("chat-day") == 4


SINGLE = {"day": {"block-size": 16}, "night": {"block-size": 32}}
CAP = dict(CFG.profile_capacity)   # day 300, night 200 req/min per replica: unequal on purpose


def morning(minute: int) -> datetime:
    """Minutes after 06:50 UTC (the night window closes at 07:00)."""
    return datetime(2024, 5, 18, 6, 50, tzinfo=timezone.utc) + timedelta(minutes=minute)


def single_workload(lagging, start: str, pods: int) -> KubernetesScaler:
    """One Deployment running ``start`` on ``pods`` ready pods (template ``t0``)."""
    api, fake = lagging
    fake.add("deployments", "serving", "chat", replicas=pods)
    return KubernetesScaler("chat", "deployment/chat", "serving", api_client=api, model="m", profiles=SINGLE,
                            default_profile=start)


def ready_capacity(fake: LaggingK8sApi, start: str) -> float:
    """Ready pods x the capacity of the profile their template runs (``t0``: the starting profile)."""
    profile_of = {" ".join(container_args("m", a)): p for p, a in SINGLE.items()} | {"t0": start}
    return sum(n * CAP[profile_of[t]] for t, n in fake.ready_by_template("chat").items())


def run_single(s: KubernetesScaler, fake: LaggingK8sApi, start: str, clock, minutes: int, p99=lambda st: 1.0):
    """The real core and ``workers.apply.roll`` each simulated minute, as the switch step calls them
    (a split is applied every tick); (state, lowest ready capacity, phases seen, outcomes)."""
    cfg = replace(CFG, max_prewarm_wait_min=0.0)  # nothing pre-warms beside a single workload
    st, lowest, seen, outcomes = SwitchState(), math.inf, [], []
    for minute in range(minutes):
        fake.now += 60
        d, st, _ = decide_switch(cfg, clock(minute), (), p99(st), None, st, s.current(), start,
                                 ready=s.ready_by_profile())
        if d.action.value != "none" or d.replicas:
            ok, text = roll(s, d)
            if not text.startswith("no change"):
                outcomes.append((d.action.value, d.phase.value, ok, text))
        lowest, seen = min(lowest, ready_capacity(fake, start)), seen + [st.phase]
    return st, lowest, seen, outcomes


@pytest.mark.parametrize("start,pods,clock,target,after", [
    ("day", 4, at, "night", 6),        # night serves less per replica: the rollout needs more pods
    ("night", 6, morning, "day", 4),   # day serves more: the pods go only once day covers the need
])
def test_single_workload_rolls_surge_only_with_ready_capacity_kept(lagging, start, pods, clock, target, after):
    _, fake = lagging
    s = single_workload(lagging, start, pods)
    fake.race_next = True                    # someone else writes the workload just before the canary patch
    st, lowest, seen, outcomes = run_single(s, fake, start, clock, 60)
    need = pods * CAP[start]
    assert lowest >= need, f"ready capacity dipped to {lowest} req/min (need {need})"
    assert outcomes[0][:3] == ("prewarm", "prewarm", False) and "cannot pre-warm" in outcomes[0][3]
    rolling = max(pods, after)               # never fewer pods while the rollout runs
    assert outcomes[1][:3] == ("move_canary", "canary", True)
    assert "maxUnavailable 0" in outcomes[1][3] and f"replicas {pods} -> {rolling}" in outcomes[1][3]
    body = [b for m, p, c, b in fake.requests if m == "PATCH" and b.get("spec", {}).get("template")][-1]
    assert body["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": "100%"}
    assert body["spec"]["replicas"] == rolling   # the count travels in the template's own patch
    assert body["spec"]["template"]["spec"]["containers"][0]["args"][-1] == str(SINGLE[target]["block-size"])
    if after < rolling:                      # the surplus goes in the settle window, not before
        assert [o[:3] for o in outcomes[2:]] == [("none", "settle", True)]
        assert f"replicas {rolling} -> {after}" in outcomes[2][3]
    assert {SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.SETTLE} <= set(seen)
    assert st.phase is SwitchPhase.STEADY and st.active_profile == target
    assert s.current() == after
    assert fake.ready_by_template("chat") == {" ".join(container_args("m", SINGLE[target])): after}


def test_single_workload_rollback_restores_day_with_ready_capacity_kept(lagging):
    _, fake = lagging
    s = single_workload(lagging, "day", 4)
    trip = lambda st: 5.0 if st.phase is SwitchPhase.MOVE else 1.0   # noqa: E731 - the breaker trips in the move
    st, lowest, seen, outcomes = run_single(s, fake, "day", at, 50, trip)
    assert lowest >= 1200, f"ready capacity dipped to {lowest} req/min"
    assert [o[:3] for o in outcomes if o[0] == "rollback"] == [("rollback", "rollback", True)]
    assert st.phase is SwitchPhase.PAUSED and st.active_profile == "day" and st.blocked_profile == "night"
    assert s.current() == 4
    assert fake.ready_by_template("chat") == {" ".join(container_args("m", SINGLE["day"])): 4}


def test_stale_resource_version_is_retried_and_statefulset_refused_with_reason(lagging):
    api, fake = lagging
    fake.add("deployments", "serving", "chat", replicas=2)
    fake.add("statefulsets", "serving", "chat-sts", replicas=2)
    s = KubernetesScaler("chat", "deployment/chat", "serving", api_client=api, model="m",
                         profiles={"day": {"block-size": 16}, "night": {"block-size": 32}})
    fake.race_next = True
    out = s.roll_profile("night")
    assert out["patched"] and out["attempts"] == 2     # 409 on the stale version, then read again
    assert s.roll_profile("night")["patched"] is False   # already there: nothing patched
    sts = KubernetesScaler("chat", "statefulset/chat-sts", "serving", api_client=api, model="m",
                           profiles={"day": {}, "night": {"block-size": 32}})
    with pytest.raises(WarmcastError, match="no maxSurge"):
        sts.roll_profile("night")


def test_every_kubernetes_launch_records_launch_to_ready(lagging):
    api, fake = lagging
    fake.add("deployments", "serving", "chat", replicas=1)
    s = KubernetesScaler("chat", "deployment/chat", "serving", api_client=api)
    fake.now = time.time()
    assert s.scale_to(3, "forecast").applied
    assert s.observe_launches(fake.now + 60) == []            # booting: not ready yet
    fake.now += COLD_S
    got = s.observe_launches(fake.now)
    assert len(got) == 2 and all(abs(x - COLD_S) < 5 for x in got)
    assert s.observe_launches(fake.now) == []                 # each launch is recorded once
    s.scale_to(5, "more")
    s.scale_to(4, "less")                                     # the newest pending launch goes first
    fake.now += COLD_S
    assert len(s.observe_launches(fake.now)) == 1


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "https://k8s.invalid"}}]
users: [{name: fake, user: {token: "not-a-real-token"}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
"""

K8S_DEPLOYMENTS = """
deployments:
  - name: chat
    cold_start_min: 15
    scaler: {kind: kubernetes, resource: deployment/chat, namespace: serving}
    profiles:
      day: {capacity_rpm: 300}
"""


def test_the_signals_step_feeds_kubernetes_launch_to_ready_into_the_lead(tmp_path, monkeypatch, redis_client,
                                                                        key_prefix, redis_server_url):
    """The loop's own path, end to end but for the cluster: the workers build the Kubernetes scaler
    from the deployments file and a kubeconfig, the plan applies a scale-up through it, and the
    signals step records its launches' launch-to-ready once ``readyReplicas`` counts them, so the
    lead becomes "measured launches".  NO cluster runs here: the official client's transport is
    swapped for the in-memory API server of this module (pods ready one cold start, here 1 s,
    after they are created), as in every test of this file."""
    from warmcast.config.settings import load_settings
    from workers import lead
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.steps import signals

    from kubernetes.config import kube_config

    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    # $KUBECONFIG, read when the client is imported: the scaler loads this file as it would a real one
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
    # loading a kubeconfig sets the client's process-wide default configuration: put it back afterwards
    monkeypatch.setattr(k8s.Configuration, "_default", k8s.Configuration._default)
    (tmp_path / "deps.yaml").write_text(K8S_DEPLOYMENTS)
    ctx = Ctx(load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=tmp_path / "deps.yaml",
                            state_dir=tmp_path / "state"), WorkerOptions(), redis_client)
    scaler = ctx.scaler("chat")  # RecordingScaler(KubernetesScaler), as the plan step applies through it
    api = scaler.inner.apps.api_client
    fake = LaggingK8sApi(api, time.time())
    fake.cold_s = 1.0
    api.rest_client = fake  # the fake transport
    fake.add("deployments", "serving", "chat", replicas=1)
    assert lead.resolve(ctx, "chat").source == "deployments file"

    fake.now = time.time()
    scaler.scale_to(3, "forecast")  # two launches
    signals.step(ctx, "chat")
    assert redis_client.llen(f"{key_prefix}:launch-ready:chat") == 0  # still booting: nothing measured
    time.sleep(1.2)
    fake.now = time.time()  # both pods ready now (readyReplicas 3)
    signals.step(ctx, "chat")
    took = [float(v) for v in redis_client.lrange(f"{key_prefix}:launch-ready:chat", 0, -1)]
    assert len(took) == 2 and all(1.0 <= s < 30.0 for s in took), took
    used = lead.resolve(ctx, "chat")
    assert used.source == "measured launches" and used.cold_start_min == pytest.approx(max(took) / 60, rel=0.05)
    signals.step(ctx, "chat")  # each launch is measured once
    assert redis_client.llen(f"{key_prefix}:launch-ready:chat") == 2
