"""`warmcast run`'s supervisor (``workers.processes.Children``) with real child processes: a child that
dies is started again after a backoff that grows, and each step is said (issue 41: a beat killed by a
stalled tick stopped the whole loop)."""
from __future__ import annotations

import sys
import time

from workers.processes import Children


def _wait_dead(kids: Children, name: str) -> None:
    deadline = time.monotonic() + 20
    while name not in kids.dead():
        assert time.monotonic() < deadline, f"{name} did not exit"
        time.sleep(0.05)


def test_a_dead_child_is_started_again_with_a_growing_backoff_and_said(tmp_path):
    kids, said = Children(), []
    cmd = [sys.executable, "-c", "import sys; sys.exit(3)"]
    kids.start("beat", cmd, {}, tmp_path / "beat.log")
    kids.start("worker", [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "worker.log")
    try:
        _wait_dead(kids, "beat")
        t0 = time.monotonic()
        assert kids.restart_dead(said.append, t0) == []
        assert said == [f"  beat exited (code 3); starting it again in 1 s (restart 1; see {tmp_path / 'beat.log'})"]
        assert kids.restart_dead(said.append, t0 + 0.5) == []         # still backing off
        first = kids.procs["beat"].pid
        assert kids.restart_dead(said.append, t0 + 1.1) == ["beat"]   # a new process
        assert kids.procs["beat"].pid != first and said[-1].startswith("  beat started again (pid ")
        _wait_dead(kids, "beat")
        kids.restart_dead(said.append, t0 + 1.2)
        assert "starting it again in 2 s (restart 2;" in said[-1]    # the backoff grows
        assert "worker" not in kids.dead()                            # a live child is left alone
    finally:
        kids.stop(grace_s=2)
