"""The deployments file reloaded when it changes (issue 44): a valid edit is taken within one check, an
invalid one keeps the running deployments and says why (log, gauge, state document), no traceback."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from loophelpers import SIM_DEPLOYMENTS
from workers import metrics
from workers.fleetfile import STATUS, FleetFile

OTHER = """  - name: other
    max_replicas: 4
    profiles:
      day: {capacity_rpm: 50}
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _write(path: Path, text: str, step: list[int] = [0]) -> None:  # noqa: B006 - a counter across calls
    """Write and move the modification time on (two writes in one clock tick must still differ)."""
    path.write_text(text)
    step[0] += 1
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + step[0] * 1_000_000_000))


def _fleet(ctx) -> tuple[FleetFile, Clock, Path]:
    clock = Clock()
    return FleetFile(ctx.settings, ctx.state, check_every_s=5, clock=clock), clock, Path(ctx.settings.deployments_file)


def test_a_valid_edit_is_taken_at_the_next_check(ctx):
    fleet, clock, path = _fleet(ctx)
    assert list(fleet.current()) == ["simdep"]
    _write(path, SIM_DEPLOYMENTS.format(cold=0.5) + OTHER)
    clock.t += 4.9
    assert list(fleet.current()) == ["simdep"]           # not due a check yet: not even a stat
    clock.t += 0.2
    assert list(fleet.current()) == ["simdep", "other"]
    assert fleet.current()["other"].max_replicas == 4
    doc = ctx.state.get(*STATUS)
    assert doc["status"] == "ok" and doc["added"] == ["other"] and doc["deployments"] == 2
    # a retuned deployment is a change too; a touch without one is not
    _write(path, SIM_DEPLOYMENTS.format(cold=0.5) + OTHER.replace("max_replicas: 4", "max_replicas: 6"))
    clock.t += 5
    assert fleet.current()["other"].max_replicas == 6 and ctx.state.get(*STATUS)["changed"] == ["other"]
    before = fleet.current()
    os.utime(path)
    clock.t += 5
    assert fleet.current() is before


def test_an_invalid_edit_keeps_the_running_deployments_and_says_why_once(ctx, caplog):
    fleet, clock, path = _fleet(ctx)
    running = fleet.current()
    caplog.set_level(logging.WARNING, logger="warmcast.workers.fleetfile")
    _write(path, SIM_DEPLOYMENTS.format(cold=0.5).replace("max_replicas: 10", "max_replicas: -3") + OTHER)
    for _ in range(3):   # refused once, then not re-read nor re-said while the content stays
        clock.t += 5
        assert fleet.current() is running
    doc = ctx.state.get(*STATUS)
    assert doc["status"] == "refused" and doc["deployments"] == 1
    assert "max_replicas" in doc["error"], doc
    assert metrics.DEPLOYMENTS_FILE_OK._value.get() == 0
    warned = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(warned) == 1 and warned[0].exc_info is None and "max_replicas" in warned[0].getMessage()
    assert "warmcast deployments check" in warned[0].getMessage()
    # fixed: taken, and the refusal cleared
    _write(path, SIM_DEPLOYMENTS.format(cold=0.5) + OTHER)
    clock.t += 5
    assert list(fleet.current()) == ["simdep", "other"]
    assert ctx.state.get(*STATUS)["status"] == "ok" and metrics.DEPLOYMENTS_FILE_OK._value.get() == 1


def test_a_change_deployments_check_refuses_is_refused_here_too(ctx):
    """Not only what the loader refuses: a GPU type the catalogue lacks is a `deployments check` error."""
    fleet, clock, path = _fleet(ctx)
    _write(path, SIM_DEPLOYMENTS.format(cold=0.5) + OTHER + "    gpu: {types: [NO-SUCH-GPU], model_memory_gb: 10}\n")
    clock.t += 5
    assert list(fleet.current()) == ["simdep"]
    assert "unknown GPU type" in ctx.state.get(*STATUS)["error"]


def test_a_removed_file_keeps_the_running_deployments(ctx):
    fleet, clock, path = _fleet(ctx)
    text = path.read_text()
    path.unlink()
    clock.t += 5
    assert list(fleet.current()) == ["simdep"]
    assert "cannot be read" in ctx.state.get(*STATUS)["error"]
    _write(path, text)            # put back as it was: nothing to refuse any more
    clock.t += 5
    assert list(fleet.current()) == ["simdep"] and ctx.state.get(*STATUS)["status"] == "ok"


def test_the_workers_context_runs_the_changed_file(ctx):
    """Through ``Ctx.deployments()``: a deployment added is there, a changed one is read anew (its
    simulated fleet rebuilt from the new entry), an invalid change leaves the context as it was."""
    ctx.cache["fleetfile"] = FleetFile(ctx.settings, ctx.state, check_every_s=0)
    path = Path(ctx.settings.deployments_file)
    old_sim = ctx.sim("simdep")
    _write(path, SIM_DEPLOYMENTS.format(cold=0.5).replace("max_replicas: 10", "max_replicas: 12") + OTHER)
    assert [d.name for d in ctx.deployments()] == ["simdep", "other"]
    assert ctx.dep("simdep").max_replicas == 12 and ctx.dep("other").max_replicas == 4
    assert ctx.sim("simdep") is not old_sim
    _write(path, "deployments: [oops\n")
    assert [d.name for d in ctx.deployments()] == ["simdep", "other"]
    assert ctx.state.get(*STATUS)["status"] == "refused"
