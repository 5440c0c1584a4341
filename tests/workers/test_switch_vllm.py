"""Day -> night profile switches applied by the loop to REAL vLLM CPU servers (local backend).

The loop's own functions run in this process (no worker: tests/workers/test_processes.py covers
the processes); the servers are real, under steady load, and which engine args each runs is read
from its own /metrics (``vllm:cache_config_info`` carries the block size).  Both profiles serve
300 req/min per server, so the plan needs one ready server throughout.  A sampler reads every
server's /health once a second (the servers listed in the scaler's state file, without its lock)
and the test asserts the count never fell below that need:

1. Day -> night: PREWARM starts the whole need on ``night`` (one server, block-size 64) beside the
   ``day`` one (block-size 32); the canary keeps day (it covers 90% of the need); the move stops day
   only once night answers /health; the breaker watches the settle window; then night is active.
2. Then night -> day, and the P99 goes up during the move: night is started again and day is
   stopped only once night answers /health; switching pauses.

Both legs run in one test on the same servers: each leg alone booted its own day and night servers
(about 30 s a boot on this CPU), and the suite must fit CI's 35 minutes.

The P99 the breaker compares is set in the stored signals by the test (1 s, or 10 s to trip it):
the breaker's logic is tested in tests/warmup; here what matters is what the loop does to servers,
and that the loop's tick runs the breaker in the canary and in the move: test 1 sends a
different P99 in each (1.10 s, 1.15 s; under the 20% limit) and the switch audit must show each
compared with the pre-switch 1.00 s in its phase.
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from loophelpers import NEEDS_VLLM, VLLM_PY, free_port, wait_for

pytestmark = NEEDS_VLLM

DEPLOYMENTS = """
deployments:
  - name: pdep
    model: dummy
    min_replicas: 1
    max_replicas: 3
    cold_start_min: 2
    scaler: {{kind: local, python: {python}, base_port: {port}}}
    default_profile: day
    profiles:
      day: {{capacity_rpm: 300, engine_args: {{max-num-seqs: 2, block-size: 32}}}}
      night: {{capacity_rpm: 300, engine_args: {{max-num-seqs: 2, block-size: 64}}}}
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
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions

    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS.format(python=VLLM_PY, port=free_port()))
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                             state_dir=tmp_path / "state")
    ctx = Ctx(settings, WorkerOptions(simulate=False))  # the worker's own client (30 s reads)
    yield ctx
    ctx.scaler("pdep").inner.close()  # stop every server the test started


def _answers(url: str) -> bool:
    """/health answers 200 (a loaded CPU server may take a few seconds to answer)."""
    try:
        return httpx.get(f"{url}/health", timeout=8).status_code == 200
    except httpx.HTTPError:
        return False


class Watch:
    """Steady load on the healthy servers, and once a second the number of them answering /health."""

    def __init__(self, state_file) -> None:
        self.state_file, self.samples, self.sent = state_file, [], 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._sample, self._load)]

    def urls(self) -> list[str]:
        try:
            return [s["url"] for s in json.loads(self.state_file.read_text())["servers"]]
        except (OSError, ValueError, KeyError):
            return []

    def _sample(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            urls = self.urls()
            with ThreadPoolExecutor(max(1, len(urls))) as pool:
                self.samples.append(sum(pool.map(_answers, urls)))
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))

    def _load(self) -> None:
        body = {"model": "", "prompt": list(range(10, 26)), "max_tokens": 4, "temperature": 0.0}
        while not self.stop.is_set():
            for url in self.urls():
                try:
                    model = httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["id"]
                    httpx.post(f"{url}/v1/completions", json={**body, "model": model}, timeout=30)
                    self.sent += 1
                except (httpx.HTTPError, ValueError, KeyError, IndexError):
                    pass
            self.stop.wait(0.5)

    def __enter__(self) -> "Watch":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


TICKS = itertools.count(1)


def _tick(ctx, p99: float):
    """One tick (the switch machine runs inside it) after a fresh scrape, with the P99 the breaker
    sees set to ``p99``; its switch fields under the names the assertions read."""
    from workers.steps import signals, tick

    doc = signals.step(ctx, "pdep").doc
    # the breaker reads the target's own P99 inside a switch: every profile's is set as well
    own = {p: p99 for p in ("day", "night")}
    ctx.state.put("signals", "pdep", {**doc, "p99_s": p99, "p99_by_profile": own}, ttl_s=3600)
    n = next(TICKS)
    out = tick.step(ctx, "pdep", tick=f"T{n:06d}", run_id=f"switch-{n}")
    return SimpleNamespace(action=out.switch, reason=out.switch_reason, applied=out.switch_applied,
                           outcome=out.switch_outcome, phase=out.phase)


def _drive(ctx, until, p99=lambda out: 1.0, timeout_s: float = 600.0) -> list:
    """Switch steps every 2 s until ``until(outcome)``; returns the outcomes."""
    outs, deadline, last = [], time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        out = _tick(ctx, p99(last))
        outs.append(out)
        last = out
        if until(out):
            return outs
        time.sleep(2.0)
    raise AssertionError(f"switch did not get there in {timeout_s:.0f} s: {[(o.phase, o.reason) for o in outs[-3:]]}")


def _start_day(ctx) -> str:
    ctx.scaler("pdep").scale_to(1, "test: one day server")
    day_url = ctx.scaler("pdep").inner.urls()[0]
    wait_for(lambda: _healthy(day_url), 300, "the day server to be healthy", poll=1.0)
    assert _block_size(day_url) == 32
    ctx.state.put("policy-config", "pdep", {"switch": {"hold_min": 0.0, "settle_min": 0.0, "prewarm_min": 0.0}})
    ctx.state.request_profile("pdep", "night", by="test")
    return day_url


PHASE_P99 = {"canary": 1.10, "move": 1.15}   # under the breaker's 20% over the pre-switch 1.00 s


def _p99_by_phase(last) -> float:
    """The P99 for the next tick: it runs in the phase the last one left (``PHASE_P99``, else 1 s)."""
    return PHASE_P99.get(last.phase if last is not None else "", 1.0)


def test_switch_under_load_then_a_breaker_trip_rolls_back_with_capacity_kept(live_ctx):
    ctx = live_ctx
    day_url = _start_day(ctx)
    with Watch(ctx.settings.state_dir / "local-scaler" / "pdep.json") as watch:
        first = _tick(ctx, 1.0)
        assert first.action == "prewarm" and first.applied and "day 1, night 1" in first.outcome, first
        outs = [first] + _drive(ctx, lambda o: o.action == "settled", p99=_p99_by_phase)
        _settled_on_night(ctx, outs, day_url, len(watch.samples))
        ctx.state.request_profile("pdep", "day", by="test")
        back = _drive(ctx, lambda o: o.action == "move_all")
        # the move has started (night stopped as day is ready): the P99 rises before it settles
        back += _drive(ctx, lambda o: o.action == "restored", p99=lambda last: 10.0)
    assert len(watch.samples) >= 10 and watch.sent > 0
    assert min(watch.samples) >= 1, f"ready servers fell below the plan's 1: {watch.samples}"
    _rolled_back_to_night(ctx, back)


def _settled_on_night(ctx, outs: list, day_url: str, samples: int) -> None:
    """Leg 1's checks: the four switch actions, each phase's breaker check, only night servers left."""
    actions = [o.action for o in outs if o.action != "none"]
    assert actions == ["prewarm", "move_canary", "move_all", "settled"], actions
    assert {"canary", "move", "steady"} <= {o.phase for o in outs}
    # night serves the planner's need from the same tick (one server, or more when the load under the
    # watch's traffic asked for more): every server left is a night one, the day server is gone
    urls = ctx.scaler("pdep").inner.urls()
    assert urls and day_url not in urls and not _healthy(day_url) and all(_block_size(u) == 64 for u in urls)
    assert ctx.scaler("pdep").inner.profile_of() == {u: "night" for u in urls}
    state = json.loads((ctx.settings.state_dir / "local-scaler" / "pdep.json").read_text())
    assert state["profile"] == "night"   # new servers start on night now
    rows = ctx.state.audit_log("pdep", kind="switch")
    assert all(r["applied"] and r["reason"] and r["outcome"] for r in rows)
    reasons = [r["reason"] for r in rows]
    for phase, p99 in PHASE_P99.items():   # the breaker compared each phase's own P99 in that phase
        check = f"breaker in the {phase}: P99 {p99:.2f} s within 20% of baseline 1.00 s"
        assert any(check in x for x in reasons), (check, reasons)


def _rolled_back_to_night(ctx, outs: list) -> None:
    """Leg 2's checks: the trip during the move, night restored (as many as the need), day retired."""
    trip = next(o for o in outs if o.action == "rollback")
    assert trip.phase == "rollback" and "during the move" in trip.reason and trip.applied
    moved = next(o for o in outs if o.action == "move_all")   # the canary was watched before the move began
    assert "breaker in the canary: P99 1.00 s within 20% of baseline 1.00 s" in moved.reason, moved.reason
    assert outs[-1].phase == "paused"
    again = ctx.scaler("pdep").inner.urls()
    assert again and ctx.scaler("pdep").inner.profile_of() == {u: "night" for u in again}
    assert all(_block_size(u) == 64 for u in again)
    alerts = [r for r in ctx.state.audit_log("pdep", kind="switch") if "rollback" in r["decision"]]
    assert alerts and all(r["applied"] for r in alerts)
