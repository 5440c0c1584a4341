"""The environment a warmcast CLI process started by a test runs in (its own Redis prefix, state directory
and deployments file), shared by the tests that run the program as a user does (tests/ is on the path of
every test module; tests/workers/loophelpers.py re-exports it)."""
from __future__ import annotations

import os
from pathlib import Path


def cli_env(tmp_path: Path, deployments: str, redis_url: str, key_prefix: str, **extra: str) -> dict[str, str]:
    """The environment of a CLI run on this test's Redis prefix, with ``deployments`` as its file."""
    deps = tmp_path / "deployments.yaml"
    deps.write_text(deployments)
    return {**os.environ, "WARMCAST_REDIS_URL": redis_url, "WARMCAST_KEY_PREFIX": key_prefix,
            "WARMCAST_DEPLOYMENTS_FILE": str(deps), "WARMCAST_STATE_DIR": str(tmp_path / "state"), **extra}
