"""The deployment-level SLO: defaults, the shipped example, and errors that name the key."""
from __future__ import annotations

from pathlib import Path

import pytest

from warmcast.config.deployments import load_deployments, parse_deployments
from warmcast.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def _file(slo: object) -> dict:
    return {"deployments": [{"name": "d", "profiles": {"day": {"capacity_rpm": 100}}, "slo": slo}]}


def test_example_declares_an_slo_and_defaults_fill_the_rest() -> None:
    dep = load_deployments(ROOT / "examples/deployments.yaml").get("chat-llama")
    assert (dep.slo.late_wait_s, dep.slo.late_share, dep.slo.ttft_p99_ms) == (5, 0.0005, 500)
    assert dep.slo.describe().startswith("late (wait > 5 s) <= 0.05%")
    bare = parse_deployments({"deployments": [{"name": "d", "profiles": {"day": {"capacity_rpm": 1}}}]})
    assert bare.get("d").slo.late_share == 0.0005 and bare.get("d").slo.ttft_p99_ms is None


@pytest.mark.parametrize("slo, key", [({"late_share": 2}, "slo.late_share"),
                                      ({"late_wait_s": 0}, "slo.late_wait_s"),
                                      ({"ttft_ms": 500}, "slo.ttft_ms")])
def test_a_bad_slo_names_the_deployment_and_key(slo: dict, key: str) -> None:
    with pytest.raises(InputError, match=f"deployment d: {key}"):
        parse_deployments(_file(slo))
