"""`warmcast deployments check` refuses unknown GPU types and pools or minimums that can never be
met (issue 31); loading the file elsewhere refuses only the contradictions that need no catalogue."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warmcast.config.deployments import load_deployments
from warmcast.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "deployments.yaml"
KNOWN = "known: ['A100-80G', 'A10G', 'L4']"


def _variant(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = EXAMPLE.read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    out = tmp_path / "deployments.yaml"
    out.write_text(text)
    return out


def _check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warmcast.cli", "deployments", "check", str(path)],
                          capture_output=True, text=True, timeout=180, cwd=path.parent, env=dict(os.environ))


def _fails_with(path: Path, *needles: str) -> str:
    r = _check(path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)
    return r.stderr


TYPES = "types: [A100-80G, A10G, L4]  #"
CAPS = "capacity_rpm: {A10G: 15, L4: 12}"
LIMITS = "limits: {physical_gpus: 16, memory_share: 0.8, hot_cold_ratio: 3}"


@pytest.mark.parametrize("edit, where, name", [
    ((TYPES, "types: [A100-80G, H900]  #"), "gpu.types", "H900"),
    ((CAPS, "capacity_rpm: {A10G: 15, B300: 12}"), "gpu.capacity_rpm", "B300"),
    (("max_instances: {A100-80G: 8}", "max_instances: {A100-80G: 8, T4: 2}"), "gpu.max_instances", "T4"),
    (("reference: A100-80G  ", "reference: V100  "), "gpu.reference", "V100"),
])
def test_an_unknown_gpu_type_is_named_with_the_known_ones(tmp_path, edit, where, name):
    bad = _variant(tmp_path, edit)
    _fails_with(bad, f"deployment chat-pools: {where}: unknown GPU type(s) ['{name}']; {KNOWN}")
    load_deployments(bad)  # the worker's, beat's and API's load path is unchanged: no catalogue there


def test_a_profile_no_allowed_type_can_hold_is_named(tmp_path):
    bad = _variant(tmp_path, ("model_memory_gb: 18 ", "model_memory_gb: 90 "))
    msg = _fails_with(bad, "deployment chat-pools: profile interactive: no allowed GPU type can serve it",
                      "deployment chat-pools: profile batch: no allowed GPU type can serve it")
    assert "A100-80G: does not fit: 90.0 GB needed" in msg


def test_a_pool_instance_over_the_memory_budget_is_named(tmp_path):
    # 50 GB at 8k fits two A100s (160 GB); the batch profile's 16k context needs 100 GB, over the
    # pools' budget of 2 GPUs x 80 GB x 0.5
    bad = _variant(tmp_path, ("model_memory_gb: 18 ", "model_memory_gb: 50 "),
                   ("max_instances: {A100-80G: 8}", "max_instances: {A100-80G: 8}\n      gpus_per_instance: 2"),
                   (LIMITS, "limits: {physical_gpus: 2, memory_share: 0.5, hot_cold_ratio: 3}"))
    msg = _fails_with(bad, "deployment chat-pools: pools.cold: one instance needs 100.0 GB, over the memory budget "
                           "of 80.0 GB")
    assert "pools.hot" not in msg  # 50 GB fits


def test_a_minimum_the_gpu_limits_cannot_place_is_named(tmp_path):
    over_gpus = _variant(tmp_path, ("max_replicas: 16\n    cold_start_min: 5", "min_replicas: 3\n    max_replicas: 16\n"
                                                                                 "    cold_start_min: 5"),
                         ("max_instances: {A100-80G: 8}", "max_instances: {A100-80G: 8}\n      max_gpus: 2"))
    _fails_with(over_gpus, "min_replicas 3 x gpu.gpus_per_instance 1 > gpu.max_gpus 2")
    over_types = _variant(tmp_path, ("max_replicas: 16\n    cold_start_min: 5", "min_replicas: 9\n    max_replicas: 16\n"
                                                                                  "    cold_start_min: 5"),
                          (TYPES, "types: [A100-80G]  #"), (CAPS, "capacity_rpm: {}"))
    _fails_with(over_types, "min_replicas 9 > 8, the gpu.max_instances of the allowed types ['A100-80G']")


@pytest.mark.parametrize("limits, pool, needle", [
    ("limits: {physical_gpus: 1, memory_share: 0.8, hot_cold_ratio: 3}", "hot",
     "pools.hot.gpu_request 0.8 > the hot share of limits.physical_gpus (1 x 3/(1+3) = 0.75)"),
    ("limits: {physical_gpus: 16, memory_share: 0.8, hot_cold_ratio: 3}\n      # cold asks more than all", "cold",
     "pools.cold.gpu_request 20 > limits.physical_gpus 16"),
])
def test_a_pool_that_can_never_run_an_instance_is_refused_by_every_loader(tmp_path, limits, pool, needle):
    edits = [(LIMITS, limits)]
    if pool == "cold":
        edits.append(("queue: 64\n", "queue: 64\n        gpu_request: 20\n"))
    bad = _variant(tmp_path, *edits)
    _fails_with(bad, "deployment chat-pools: pools:", needle)
    with pytest.raises(InputError, match="can never run an instance"):
        load_deployments(bad)


def test_max_gpus_below_one_instance_is_refused_by_every_loader(tmp_path):
    bad = _variant(tmp_path, ("max_instances: {A100-80G: 8}", "max_instances: {A100-80G: 8}\n"
                                                              "      gpus_per_instance: 4\n      max_gpus: 2"))
    with pytest.raises(InputError, match=r"max_gpus 2 < gpus_per_instance 4: not one instance fits"):
        load_deployments(bad)
    _fails_with(bad, "max_gpus 2 < gpus_per_instance 4")


def test_a_gpu_fraction_too_small_for_its_instance_is_named(tmp_path):
    # the batch profile's 16k context needs 2 x 30 GB; gpu_request 0.5 of an 80 GB A100 holds 40
    bad = _variant(tmp_path, ("model_memory_gb: 18 ", "model_memory_gb: 30 "),
                   ("queue: 64\n", "queue: 64\n        gpu_request: 0.5\n"))
    msg = _fails_with(bad, "deployment chat-pools: pools.cold: gpu_request 0.5 gives an instance 40 GB of a 80 GB GPU "
                           "but it needs 60.0 GB; raise gpu_request to at least 0.75")
    assert "pools.hot" not in msg  # 30 GB at 8k fits the hot pool's 0.8 x 80 GB
    load_deployments(bad)  # a catalogue check: the loaders are unchanged


def test_a_cold_queue_no_allowed_fleet_serves_within_its_deadline_is_named(tmp_path):
    # batch serves 60 requests/min at utilisation 1.0: 1,800 per instance in 30 min; 40,000 need 23
    bad = _variant(tmp_path, ("queue: 64\n", "queue: 40000\n        max_instances: 10\n"))
    msg = _fails_with(bad, "deployment chat-pools: pools.cold: a full queue of 40000 needs 23 instance(s) to be "
                           "served within slo.deadline_min 30 (1800 requests each), more than max_replicas 16",
                      "more than the GPUs (limits.physical_gpus / pools.cold.gpu_request) 16",
                      "more than pools.cold.max_instances 10")
    assert "pools.hot" not in msg
    ok = _variant(tmp_path, ("queue: 64\n", "queue: 28800\n"))  # 16 instances drain it exactly
    assert _check(ok).returncode == 0
