"""The environment a warmcast CLI process started by a test runs in (its own Redis prefix, state directory
and deployments file), shared by the tests that run the program as a user does."""
from __future__ import annotations

import os
from pathlib import Path


def cli_env(tmp_path: Path, redis_server_url: str, key_prefix: str, deployments: str) -> dict[str, str]:
    deps = tmp_path / "deployments.yaml"
    deps.write_text(deployments)
    return {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
            "WARMCAST_DEPLOYMENTS_FILE": str(deps), "WARMCAST_STATE_DIR": str(tmp_path / "state")}
