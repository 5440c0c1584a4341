"""The Kubernetes example for the two pools agrees with the pools declared in examples/deployments.yaml."""
from __future__ import annotations

from pathlib import Path

import yaml

from warmcast.config.deployments import load_deployments

ROOT = Path(__file__).resolve().parents[2]
SLICES_PER_GPU = 10  # the time-slicing the manifest documents


def test_manifests_match_the_declared_pools():
    docs = [d for d in yaml.safe_load_all((ROOT / "docs/k8s/pools.yaml").read_text()) if d]
    pools = load_deployments(ROOT / "examples/deployments.yaml").get("chat-pools").pools
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PriorityClass"}
    assert classes["latency-critical"]["value"] > classes["batch-processing"]["value"]
    assert classes["batch-processing"]["preemptionPolicy"] == "Never"
    deps = {f"deployment/{d['metadata']['name']}": d for d in docs if d["kind"] == "Deployment"}
    for spec in (pools.hot, pools.cold):
        pod = deps[spec.scaler_resource]["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == spec.priority_class
        c = pod["containers"][0]
        assert c["resources"]["requests"]["nvidia.com/gpu"] == spec.gpu_request * SLICES_PER_GPU
        args = c["args"]
        assert int(args[args.index("--max-num-seqs") + 1]) == spec.max_batch
        assert float(args[args.index("--gpu-memory-utilization") + 1]) <= pools.limits.memory_share
    quota = {d["metadata"]["name"]: int(d["spec"]["hard"]["requests.nvidia.com/gpu"]) for d in docs
             if d["kind"] == "ResourceQuota"}
    r = pools.limits.hot_cold_ratio
    assert quota["all-pool-gpus"] == pools.limits.physical_gpus * SLICES_PER_GPU
    assert quota["hot-pool-gpus"] == pools.limits.physical_gpus * SLICES_PER_GPU * r / (1 + r)
