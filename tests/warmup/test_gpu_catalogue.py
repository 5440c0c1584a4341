"""The GPU catalogue file, the deployments file's gpu/pools keys, and a deployment's GPU options."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from warmcast.config.deployments import load_deployments, parse_deployments
from warmcast.errors import InputError
from warmup.planning.gpu_catalogue import deployment_options, load_catalogue

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployments.yaml"


def _raw() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def _pools_dep(raw: dict) -> dict:
    return next(d for d in raw["deployments"] if d["name"] == "chat-pools")


def test_shipped_catalogue_has_the_three_types():
    cat = load_catalogue()
    assert (cat["A100-80G"].memory_gb, cat["A100-80G"].cost_index, cat["A100-80G"].bandwidth_gbs) == (80, 1.0, 2039)
    assert (cat["A10G"].memory_gb, cat["A10G"].tflops_fp16, cat["A10G"].cost_index) == (24, 125, 0.35)
    assert (cat["L4"].memory_gb, cat["L4"].bandwidth_gbs, cat["L4"].cost_index) == (24, 300, 0.28)


def test_a_user_file_adds_and_overrides_types(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("gpus:\n  H100: {memory_gb: 80, tflops_fp16: 989, bandwidth_gbs: 3350, cost_index: 1.6}\n"
                 "  L4: {memory_gb: 24, tflops_fp16: 121, bandwidth_gbs: 300, cost_index: 0.2}\n")
    cat = load_catalogue(f)
    assert cat["H100"].cost_index == 1.6 and cat["L4"].cost_index == 0.2 and "A10G" in cat
    f.write_text("gpus:\n  H100: {memory_gb: 80, tflops_fp16: 989, bandwidth_gbs: -1, cost_index: 1.6}\n")
    with pytest.raises(InputError, match=r"mine.yaml: gpus.H100.bandwidth_gbs: must be > 0"):
        load_catalogue(f)
    with pytest.raises(InputError, match="does not exist"):
        load_catalogue(tmp_path / "nope.yaml")


def test_example_pools_deployment_options_and_memory_fit():
    dep = load_deployments(EXAMPLE).get("chat-pools")
    assert dep.pools.hot.priority_class == "latency-critical" and dep.pools.cold.slo.deadline_min == 30
    opts, excluded = deployment_options(dep, "interactive")
    by = {o.gpu.name: o for o in opts}
    assert set(by) == {"A100-80G", "A10G", "L4"} and excluded == {}
    assert by["A100-80G"].capacity_source.startswith("profile interactive") and by["L4"].capacity_rpm == 12
    # batch needs 16k tokens: 18 GB x 2 = 36 GB only fits on the A100; declared rates scale with the profile
    opts, excluded = deployment_options(dep, "batch")
    assert [o.gpu.name for o in opts] == ["A100-80G"] and set(excluded) == {"A10G", "L4"}
    assert "36.0 GB" in excluded["L4"]
    # a calibration, when one is given, wins over the declared value
    opts, _ = deployment_options(dep, "interactive", calibrated={"L4": 10.0})
    assert {o.gpu.name: (o.capacity_rpm, o.capacity_source) for o in opts}["L4"] == (10.0, "calibration")


def test_undeclared_types_are_estimated_by_bandwidth_and_say_so():
    raw = _raw()
    d = _pools_dep(raw)
    d["gpu"]["capacity_rpm"] = {}
    dep = parse_deployments(raw).get("chat-pools")
    by = {o.gpu.name: o for o in deployment_options(dep, "interactive")[0]}
    assert by["L4"].capacity_rpm == pytest.approx(40 * 300 / 2039)
    assert "estimated" in by["L4"].capacity_source


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["pools"]["hot"].update(profiles=["nope"]), "chat-pools.*pools.hot.profiles"),
    (lambda d: d["pools"]["cold"]["slo"].pop("deadline_min"), "deadline_min"),
    (lambda d: d["pools"]["hot"]["slo"].pop("late_share"), "late_share"),
    (lambda d: d["pools"]["limits"].update(memory_share=1.5), "pools.limits.memory_share"),
    (lambda d: d["pools"]["attribution"].update(default="warm"), "unknown pool"),
    (lambda d: d["gpu"].update(model_memory_gb=0), "gpu.model_memory_gb"),
])
def test_bad_pools_or_gpu_keys_name_the_deployment_and_key(edit, message):
    raw = _raw()
    edit(_pools_dep(raw))
    with pytest.raises(InputError, match=message):
        parse_deployments(raw)


def test_unknown_gpu_type_is_named():
    raw = _raw()
    _pools_dep(raw)["gpu"]["types"] = ["A100-80G", "TPU"]
    with pytest.raises(InputError, match=r"unknown GPU type\(s\) \['TPU'\]"):
        deployment_options(parse_deployments(raw).get("chat-pools"))
