"""The fleet tick (issue 45, workers/steps/fleet.py): per node pool, the warm GPUs from the stored
forecasts of its deployments, stored with the reason, audited under the pool, shown by
``GET /v1/fleet`` and applied to the pool's balloon Deployment (the official Kubernetes client
against an in-memory apps/v1 API: no cluster runs here).  Real Redis."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
import yaml
from fastapi.testclient import TestClient
from kubernetes import client as k8s

from fakek8s import FakeK8sApi
from warmcast.config.settings import load_settings
from workers.context import Ctx
from workers.options import WorkerOptions
from workers.steps import fleet

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def fleet_file(tmp_path, balloon: bool) -> str:
    pool = {"name": "a100", "gpu": "A100-80G", "gpus_per_node": 8, "node_lead_min": 10, "max_nodes": 6,
            **({"balloon": "deployment/balloons-a100", "namespace": "inference"} if balloon else {})}
    deps = [{"name": n, "node_pool": "a100", "scaler": {"kind": "dryrun"},
             "profiles": {"day": {"capacity_rpm": 100}}} for n in ("chat", "code")]
    path = tmp_path / "deployments.yaml"
    path.write_text(yaml.safe_dump({"node_pools": [pool], "deployments": deps}))
    return str(path)


def make_ctx(tmp_path, redis_client, key_prefix, redis_server_url, balloon: bool, simulate: bool) -> Ctx:
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix,
                             deployments_file=fleet_file(tmp_path, balloon), state_dir=tmp_path / "state")
    ctx = Ctx(settings, WorkerOptions(simulate=simulate), redis_client)
    for name, mid in (("chat", 400.0), ("code", 200.0)):       # 4 and 2 GPUs at the median
        ctx.state.put("forecast", name, {"origin": NOW.strftime("%Y-%m-%d %H:%M:00"), "model": "test",
                                         "step_min": 1, "quantiles": {"0.5": [mid] * 30, "0.95": [mid * 1.5] * 30}})
        ctx.state.put("signals", name, {"provisioned": 3})
    return ctx


def test_the_fleet_tick_stores_audits_and_shows_each_pools_warm_gpus(tmp_path, redis_client, key_prefix,
                                                                     redis_server_url):
    ctx = make_ctx(tmp_path, redis_client, key_prefix, redis_server_url, balloon=False, simulate=True)
    out = fleet.step(ctx, NOW)
    doc = ctx.state.get(fleet.KIND, "a100")
    # P95 of the pooled demand: 6 GPUs at the median, spread sqrt(2^2 + 1^2) GPUs / z: 6 + 2.24 -> 9; 6 held
    assert out.pools == {"a100": 3} and doc["warm_gpus"] == 3 and doc["nodes_wanted"] == 2
    assert doc["members"] == {"chat": 6.0, "code": 3.0}        # alone: 6 + 3 = 9 GPUs, pooled 8.24
    assert doc["applied"] is False and "simulated fleet" in doc["outcome"]
    entry = ctx.state.audit_log(fleet.audit_key("a100"))[0]
    assert entry["kind"] == "node-pool" and "P95 of the pooled demand of 2 deployment(s)" in entry["reason"]

    from api.app import create_app

    app = create_app(ctx.settings)
    body = TestClient(app).get("/v1/fleet").json()
    assert body["pools"][0]["pool"] == "a100" and body["pools"][0]["warm_gpus"] == 3
    assert "P95 of the pooled demand" in body["pools"][0]["reason"]


def test_the_balloon_deployment_is_scaled_to_the_warm_gpus(tmp_path, redis_client, key_prefix, redis_server_url):
    ctx = make_ctx(tmp_path, redis_client, key_prefix, redis_server_url, balloon=True, simulate=False)
    api = k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid"))
    fake = FakeK8sApi(api)
    api.rest_client = fake
    fake.add("deployments", "inference", "balloons-a100", replicas=0)
    fleet.step(ctx, NOW, api_client=api)
    assert fake.objects[("deployments", "inference", "balloons-a100")].spec.replicas == 3
    assert ctx.state.get(fleet.KIND, "a100")["applied"] is True


def test_the_plan_fan_out_sends_the_fleet_tick_after_the_deployments_only_with_pools(tmp_path, redis_client,
                                                                                    key_prefix, redis_server_url):
    from workers.fanout import FLEET_TASK, fan_out

    ctx = make_ctx(tmp_path, redis_client, key_prefix, redis_server_url, balloon=False, simulate=True)
    sent = []
    fan_out(ctx, "plan", "run-1", lambda name, **kw: sent.append((name, kw)), tick="2030-01-01T00:00:00")
    assert [n for n, _ in sent] == ["warmcast.plan", "warmcast.plan", FLEET_TASK]
    assert sent[-1][1]["countdown"] == 0.5 * ctx.options.plan_every_s   # after the deployments' ticks
    sent.clear()
    fan_out(ctx, "scrape", "run-2", lambda name, **kw: sent.append((name, kw)), tick="2030-01-01T00:00:00")
    assert FLEET_TASK not in [n for n, _ in sent]


POOLED = """
node_pools:
  - {name: a100, gpu: A100-80G, gpus_per_node: 8, node_lead_min: 10, max_nodes: 6}
deployments:
  - name: simdep
    node_pool: a100
    cold_start_min: 0.1
    profiles:
      day: {capacity_rpm: 100}
"""


@pytest.mark.integration
def test_the_fleet_tick_runs_on_the_beat_schedule_through_a_real_worker(make_loop):
    from loophelpers import ctx_for, wait_for

    loop = make_loop(deployments=POOLED)
    ctx = ctx_for(loop)
    from workers.simulate import seed_deployment

    seed_deployment(ctx, "simdep", mean_rpm=80)
    loop.worker()
    loop.beat()
    doc = wait_for(lambda: ctx.state.get(fleet.KIND, "a100"), 90, "the pool's decision stored", loop)
    assert doc["warm_gpus"] >= 0 and "node lead from deployments file" in doc["reason"]
    assert doc["applied"] is False and "simulated fleet" in doc["outcome"]
    assert ctx.state.audit_log(fleet.audit_key("a100"))
    assert "Traceback" not in loop.logs()
