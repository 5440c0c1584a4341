"""The deployments file's node pools (issue 45): a deployment names a pool that exists, its instance
fits on a node, and a pool's node lead is a finite number of minutes; `warmcast deployments check`
and the workers' loader refuse anything else with the field named."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from warmcast.config.deployments import load_deployments
from warmcast.errors import InputError

POOL = {"name": "a100", "gpu": "A100-80G", "gpus_per_node": 8, "node_lead_min": 10, "max_nodes": 4}


def fleet(tmp_path, pool_changes=None, dep_changes=None):
    doc = {"node_pools": [{**POOL, **(pool_changes or {})}],
           "deployments": [{"name": "chat", "node_pool": "a100", "gpus_per_replica": 2,
                            "profiles": {"day": {"capacity_rpm": 100}}, **(dep_changes or {})}]}
    path = tmp_path / "deployments.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_valid_pool_loads(tmp_path):
    dfile = load_deployments(fleet(tmp_path))
    assert dfile.node_pools[0].gpus_per_node == 8
    assert dfile.deployments[0].node_pool == "a100"


@pytest.mark.parametrize("pool, dep, named", [
    ({}, {"node_pool": "h100"}, "node_pool 'h100' is not one of node_pools ['a100']"),
    ({}, {"gpus_per_replica": 16}, "gpus_per_replica 16 (GPUs per instance) is above node pool a100's gpus_per_node 8"),
    ({"node_lead_min": float("nan")}, {}, "node_pools.0.node_lead_min"),
    ({"node_lead_min": float("inf")}, {}, "node_pools.0.node_lead_min"),
    ({"node_lead_min": 0}, {}, "node_pools.0.node_lead_min"),
])
def test_a_bad_pool_or_member_is_refused_naming_the_field(tmp_path, pool, dep, named):
    path = fleet(tmp_path, pool, dep)
    with pytest.raises(InputError) as err:
        load_deployments(path)
    assert named in str(err.value)
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "deployments", "check", str(path)],
                       capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert r.returncode != 0 and named in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


def test_the_workers_refuse_a_bad_pool_naming_the_field(tmp_path, redis_client, key_prefix, redis_server_url):
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions

    path = fleet(tmp_path, dep_changes={"node_pool": "missing"})
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=path,
                             state_dir=tmp_path / "state")
    with pytest.raises(InputError, match="node_pool 'missing' is not one of node_pools"):
        Ctx(settings, WorkerOptions(simulate=True), redis_client).deployments()
