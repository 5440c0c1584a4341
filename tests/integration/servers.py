"""A real vLLM CPU server for the length of a fixture (the integration modules' servers)."""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from warmup.actuators.local import LocalServer


@contextmanager
def running(srv: LocalServer, tmp: Path) -> Iterator[LocalServer]:
    """Start ``srv``, yield it once healthy (a boot takes a minute or more on CPU), then stop it
    and remove ``tmp`` (its model and logs)."""
    srv.start()
    try:
        srv.wait_healthy_sync(timeout_s=300)
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
