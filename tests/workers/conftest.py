"""Fixtures for the workers' tests: real worker/beat processes (see loophelpers.py)."""
from __future__ import annotations

import pytest

from loophelpers import SIM_DEPLOYMENTS, Loop
from warmcast.config.settings import load_settings
from workers.context import Ctx
from workers.options import WorkerOptions


@pytest.fixture
def make_loop(tmp_path, redis_server_url, key_prefix):
    """Build a Loop for this test's prefix; every process it started is killed afterwards."""
    made: list[Loop] = []

    def make(cold_start_min: float = 0.1, redis_url: str | None = None, env: dict[str, str] | None = None,
             deployments: str | None = None) -> Loop:
        deps = tmp_path / "deployments.yaml"
        deps.write_text(deployments or SIM_DEPLOYMENTS.format(cold=cold_start_min))
        base = {"WARMCAST_DEPLOYMENTS_FILE": str(deps), "WARMCAST_WORKERS_SIMULATE": "1"}
        loop = Loop(tmp_path, redis_url or redis_server_url, key_prefix, {**base, **(env or {})})
        made.append(loop)
        return loop

    yield make
    for loop in made:
        loop.stop_all()



@pytest.fixture
def ctx(tmp_path, redis_client, key_prefix, redis_server_url) -> Ctx:
    """A workers context on the simulated fleet (no processes), for step-level tests."""
    deps = tmp_path / "deployments.yaml"
    deps.write_text(SIM_DEPLOYMENTS.format(cold=0.5))
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    return Ctx(settings, WorkerOptions(simulate=True), redis_client)
