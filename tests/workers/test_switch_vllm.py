"""A day -> night profile switch applied by the loop to REAL vLLM CPU servers (local backend).

The loop's own functions run in this process (no worker: tests/workers/test_processes.py
covers the processes); the servers are real, and which engine args each one runs is read
from its own /metrics (``vllm:cache_config_info`` carries the block size):

1. one server on ``day`` (block-size 32);
2. a manual request for ``night`` goes through the switch machine: PREWARM starts one
   ``night`` server (block-size 64) beside it;
3. once it is ready, MOVE_CANARY finds the canary share already on ``night``;
4. with the hold set to 0 minutes, MOVE_ALL restarts the ``day`` server on ``night``'s args,
   on the same port.

Every step is in the audit log, applied, with its reason and what was done.
"""
from __future__ import annotations

import json
import re

import httpx
import pytest
import redis

from loophelpers import NEEDS_VLLM, VLLM_PY, free_port, wait_for

pytestmark = NEEDS_VLLM

DEPLOYMENTS = """
deployments:
  - name: pdep
    model: dummy
    min_replicas: 1
    max_replicas: 2
    cold_start_min: 2
    scaler: {{kind: local, python: {python}, base_port: {port}}}
    default_profile: day
    profiles:
      day: {{capacity_rpm: 300, engine_args: {{max-num-seqs: 2, block-size: 32}}}}
      night: {{capacity_rpm: 200, engine_args: {{max-num-seqs: 2, block-size: 64}}}}
"""


def _block_size(url: str) -> int | None:
    """The block size the server at ``url`` runs with, from its own /metrics."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=15).text
    except httpx.HTTPError:
        return None
    m = re.search(r'^vllm:cache_config_info\{[^}]*block_size="(\d+)"', text, re.M)
    return int(m.group(1)) if m else None


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def live_ctx(tmp_path, redis_server_url, key_prefix):
    from warmcast.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions

    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS.format(python=VLLM_PY, port=free_port()))
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    ctx = Ctx(settings, WorkerOptions(simulate=False), redis.Redis.from_url(redis_server_url))
    yield ctx
    ctx.scaler("pdep").inner.close()  # stop every server the test started


def test_loop_switches_real_servers_day_to_night_prewarm_canary_all(live_ctx):
    from workers.steps import signals, switch

    ctx = live_ctx
    first = ctx.scaler("pdep").scale_to(1, "test: one day server")
    day_url = ctx.scaler("pdep").inner.urls()[0]
    assert (first.before, first.after, first.changed) == (0, 1, True)
    wait_for(lambda: _healthy(day_url), 300, "the day server to be healthy", poll=1.0)
    assert _block_size(day_url) == 32
    ctx.state.put("policy-config", "pdep", {"switch": {"hold_min": 0.0}})

    # PREWARM: a night server starts beside the day one.
    ctx.state.request_profile("pdep", "night", by="test")
    out = switch.step(ctx, "pdep")
    assert out.action == "prewarm" and out.applied, out
    profiles = ctx.scaler("pdep").inner.profile_of()
    night_url = next(u for u, p in profiles.items() if p == "night")
    assert profiles == {day_url: "day", night_url: "night"}
    assert night_url in out.outcome
    wait_for(lambda: _healthy(night_url), 300, "the pre-warmed night server to be healthy", poll=1.0)
    assert _block_size(night_url) == 64 and _block_size(day_url) == 32

    # The scrape reports each instance's profile: the machine sees its target ready.
    sig = signals.step(ctx, "pdep").doc
    assert {i["url"]: i["profile"] for i in sig["instances"]} == {day_url: "day", night_url: "night"}

    # MOVE_CANARY: the canary share (ceil(10% of 2) = 1) is already the pre-warmed server.
    out = switch.step(ctx, "pdep")
    assert out.action == "move_canary" and out.applied, out
    assert "1 of 2" in out.outcome and "none restarted" in out.outcome

    # MOVE_ALL after the (zero) hold: the day server's process restarts on night's args, same port.
    out = switch.step(ctx, "pdep")
    assert out.action == "move_all" and out.applied, out
    assert "2 of 2" in out.outcome and day_url in out.outcome
    assert ctx.scaler("pdep").inner.profile_of() == {day_url: "night", night_url: "night"}
    wait_for(lambda: _healthy(day_url), 300, "the restarted server to be healthy", poll=1.0)
    assert _block_size(day_url) == 64

    # New servers now start on night too (the scaler's profile is kept in its state file).
    state = json.loads((ctx.settings.state_dir / "local-scaler" / "pdep.json").read_text())
    assert state["profile"] == "night"
    rows = ctx.state.audit_log("pdep", kind="switch")
    assert [r["decision"].split()[0] for r in reversed(rows)] == ["prewarm", "move_canary", "move_all"]
    assert all(r["applied"] and r["reason"] and r["outcome"] for r in rows)
