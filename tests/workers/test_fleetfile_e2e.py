"""The deployments file edited under a REAL worker and beat (issue 44): a deployment added is ticked
without a restart; an invalid edit is refused, the running deployments keep their ticks, and the
worker's log and the state document say why, with no traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from loophelpers import SIM_DEPLOYMENTS, ctx_for, wait_for
from workers.fleetfile import STATUS
from workers.simulate import seed_deployment

pytestmark = pytest.mark.integration

ADDED = """  - name: added
    cold_start_min: 0.1
    max_replicas: 10
    profiles:
      day: {capacity_rpm: 100}
"""


def test_a_deployment_added_to_the_file_is_ticked_and_an_invalid_edit_is_refused(make_loop):
    loop = make_loop(env={"WARMCAST_WORKERS_FORECAST_EVERY_S": "3600", "WARMCAST_WORKERS_INGEST_EVERY_S": "3600"})
    ctx = ctx_for(loop)
    seed_deployment(ctx, "simdep", mean_rpm=80)
    worker = loop.worker()
    loop.beat()
    wait_for(lambda: ctx.state.audit_log("simdep", kind="scale"), 60, "simdep's first tick", loop)
    path = Path(loop.env["WARMCAST_DEPLOYMENTS_FILE"])
    path.write_text(SIM_DEPLOYMENTS.format(cold=0.1) + ADDED)
    wait_for(lambda: ctx.state.audit_log("added", kind="scale"), 30, "the added deployment's first tick", loop)
    assert (ctx.state.get(*STATUS) or {}).get("added") == ["added"]
    path.write_text(SIM_DEPLOYMENTS.format(cold=0.1) + ADDED.replace("max_replicas: 10", "max_replicas: -1"))
    wait_for(lambda: (ctx.state.get(*STATUS) or {}).get("status") == "refused", 30, "the edit refused", loop)
    assert "max_replicas" in ctx.state.get(*STATUS)["error"]
    n = len(ctx.state.audit_log("added", kind="scale", limit=1000))
    wait_for(lambda: len(ctx.state.audit_log("added", kind="scale", limit=1000)) >= n + 2, 30,
             "the running deployments ticking on", loop)
    log = worker.log_path.read_text()
    assert "changed but is refused" in log and "warmcast deployments check" in log
    assert "Traceback" not in loop.logs()
