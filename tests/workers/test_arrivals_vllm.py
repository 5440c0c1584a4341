"""Acceptance of arrival counting with two REAL vLLM CPU servers through the local backend.

N requests over about three minutes, one server saturated (max-num-seqs 1, bursts queue), warmup
requests sent by warmcast's own warmup run to the other, that other scaled in mid-window, and one
server's scrape failing (its API process stopped for a few rounds): the stored arrivals of those
minutes sum to exactly N, no minute of the window reads zero, none spikes.  The loop's steps run
in-process (signals every 5 s, then ingest) against the real Redis and the real servers.  The
two launches, seen booting then ready, set the planner's lead from their measured launch-to-ready.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import httpx
import pytest

from loophelpers import NEEDS_VLLM, VLLM_PY, free_port
from warmcast.settings import load_settings
from workers import lead
from workers.context import Ctx
from workers.options import WorkerOptions
from workers.steps import ingest, signals, warmup_run

pytestmark = NEEDS_VLLM

DEPLOYMENTS = """
deployments:
  - name: vdep
    model: dummy
    min_replicas: 1
    max_replicas: 2
    scaler: {{kind: local, python: {python}, base_port: {port}}}
    signals: {signals}
    profiles:
      day: {{capacity_rpm: 60, engine_args: {{max-num-seqs: 1}}}}
"""


class Sender:
    """Sends completions on a schedule from its own thread; counts the ones the servers answered."""

    def __init__(self) -> None:
        self.ok = 0
        self.sent_at: list[float] = []
        self.lock = threading.Lock()

    def run(self, schedule: list[tuple[float, str]], t0: float) -> threading.Thread:
        async def one(c: httpx.AsyncClient, url: str, model: str) -> None:
            r = await c.post(f"{url}/v1/completions", json={"model": model, "prompt": [11, 12, 13], "max_tokens": 4,
                                                            "ignore_eos": True, "temperature": 0.0})
            with self.lock:
                self.ok += r.status_code == 200

        async def main() -> None:
            # a fresh connection per request: a kept-alive one the server closes reads as a lost request
            async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as c:
                models = {u: (await c.get(f"{u}/v1/models")).json()["data"][0]["id"] for u in {u for _, u in schedule}}
                tasks = []
                for at, url in sorted(schedule):
                    await asyncio.sleep(max(0.0, t0 + at - time.time()))
                    self.sent_at.append(time.time())
                    tasks.append(asyncio.create_task(one(c, url, models[url])))
                await asyncio.gather(*tasks)

        th = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        th.start()
        return th


def _in_flight(doc: dict, url: str) -> float:
    i = next(i for i in doc["instances"] if i["url"] == url)
    return (i.get("running") or 0) + (i.get("waiting") or 0)


def test_real_servers_arrivals_sum_to_what_was_sent(tmp_path, redis_client, key_prefix, redis_server_url):
    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS.format(python=VLLM_PY, port=free_port(), signals="{source: scrape}"))
    ctx = Ctx(load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                            state_dir=tmp_path / "state"), WorkerOptions(simulate=False), redis_client)
    scaler = ctx.scaler("vdep").inner  # built afresh from the state file at each call, as the loop does
    scaler.scale_to(2, "test")
    try:
        local = scaler.make()
        # the loop sees both launches booting: it measures their launch-to-ready
        assert {i["state"] for i in signals.step(ctx, "vdep").doc["instances"]} == {"booting"}
        asyncio.run(local.wait_ready(timeout_s=400))
        a, b = local.urls()
        ready = time.time()
        signals.step(ctx, "vdep")  # the baseline round (and the one that sees them ready)
        used = lead.resolve(ctx, "vdep")
        took = [s.started_wall for s in local.servers]
        assert used.source == "measured launches"
        assert min(ready - t for t in took) / 60 <= used.cold_start_min <= (time.time() - min(took)) / 60
        schedule = [(t, a) for t in range(0, 150, 4)] + [(t, b) for t in range(0, 60, 6)]
        schedule += [(t + d, a) for t in (20, 60, 100) for d in (0.1, 0.2, 0.3)]  # bursts queue on a
        sender, t0 = Sender(), time.time() + 1
        th = sender.run(schedule, t0)
        warm = threading.Thread(target=lambda: warmup_run.step(ctx, "vdep", urls=[b], requests=4, concurrency=2,
                                                               duration_s=15), daemon=True)
        stopped = scaled_in = warm_started = False
        saw_queue = False
        while th.is_alive() or time.time() < t0 + 160:
            t = time.time() - t0
            if t >= 20 and not warm_started:
                warm.start()
                warm_started = True
            if 80 <= t < 92 and not stopped:
                os.kill(local.servers[0].pid, signal.SIGSTOP)  # a's scrape fails for a few rounds
                stopped = True
            if t >= 92 and stopped:
                os.kill(local.servers[0].pid, signal.SIGCONT)
                stopped = None
            doc = signals.step(ctx, "vdep").doc
            saw_queue = saw_queue or any((i.get("waiting") or 0) > 0 for i in doc["instances"])
            if t >= 100 and not scaled_in and not warm.is_alive() and _in_flight(doc, b) == 0:
                scaler.scale_to(1, "test scale-in")  # b leaves, its last requests already read
                scaled_in = True
            time.sleep(5)
        # the bursts queue on a for well under a second: a 5 s scrape sees that queue only sometimes
        # (saw_queue is reported, not required; issue 13 keeps a robust saturation case open)
        assert scaled_in and stopped is None, (scaled_in, stopped)
        print(f"queue seen by a scrape: {saw_queue}")
        while time.time() % 60 > 55 or signals.step(ctx, "vdep").doc["running"]:
            time.sleep(2)
        time.sleep(61 - time.time() % 60)
        signals.step(ctx, "vdep")  # a round in the next minute: the window's minutes are complete
        ingest.step(ctx, "vdep")
    finally:
        scaler.scale_to(0, "test end")
    frame = ctx.store.frame("vdep")
    first, last = int(min(sender.sent_at) // 60), int(max(sender.sent_at) // 60)
    window = frame[(frame.index.asi8 // 60_000_000_000 >= first) & (frame.index.asi8 // 60_000_000_000 <= last)]
    n = sender.ok
    assert round(float(frame["requests"].sum()), 6) == n, frame
    assert n == len(schedule)
    sent = {m: sum(1 for s in sender.sent_at if int(s // 60) == m) for m in range(first, last + 1)}
    assert (window["requests"] > 0).all(), frame
    assert float(window["requests"].max()) <= 1.5 * max(sent.values()), (frame, sent)
    assert (frame["coverage"] < 1).any()  # the minutes of the failed scrape are marked incomplete
