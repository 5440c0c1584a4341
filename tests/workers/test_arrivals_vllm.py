"""Acceptance of arrival counting with two REAL vLLM CPU servers through the local backend.

N requests over about two minutes, one server saturated (max-num-seqs 1 and bursts of long
fixed-length requests, so that requests wait seconds in its queue across rounds),
warmup requests sent by warmcast's own warmup run to the other, that other scaled in
mid-window, and one server's scrape failing (its API process stopped for a few rounds): the
stored arrivals of those minutes sum to exactly N, no minute of the window reads zero, none
spikes.  The loop's steps run in-process (signals every 5 s, then ingest) against the real Redis
and the real servers, read two ways in the same window: each server's /metrics (``source:
scrape``) and a real Prometheus scraping them (``source: prometheus``: per-instance counters by
PromQL, fed through the same counting).  The two views are two contexts on one fleet (one state
directory, two key prefixes); the scrape view runs the warmup, and its records of what warmcast
sent are copied to the Prometheus view before each of its rounds, as one deployment's loop would
share them.  The two launches, seen booting then ready, set the planner's lead from their
measured launch-to-ready.
"""
from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time

import httpx
import pytest

from loophelpers import NEEDS_VLLM, VLLM_PY, free_port
from promserver import NEEDS_PROMETHEUS, Prometheus
from vllmmetrics import waited_longer_than
from warmcast.config.settings import load_settings
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
QUEUE_S = 16.0  # how long each burst keeps requests waiting on the saturated server (> three 5 s rounds)
PROBES = 3      # timed probe requests: the burst is sized from the fastest
LONG = 880      # a burst request's output tokens: the 120-token prompt plus these stay within 1,024
# 120 prompt tokens, not 3: on this project's 2-core machine the vLLM 0.32 CPU worker died with
# SIGILL (exit -4) on 3-token prompts in several runs (a kernel path for tiny prefills), while
# 120-token prompts ran; prompt + longest output stay within the tiny model's max-model-len 1024.
PROMPT = list(range(11, 131))


class Sender:
    """Sends completions on a schedule from its own thread; counts the ones the servers answered."""

    def __init__(self) -> None:
        self.ok = 0
        self.sent_at: list[float] = []
        self.lock = threading.Lock()
        self.models: dict[str, str] = {}

    async def one(self, c: httpx.AsyncClient, url: str, max_tokens: int) -> None:
        self.sent_at.append(time.time())
        if url not in self.models:
            self.models[url] = (await c.get(f"{url}/v1/models")).json()["data"][0]["id"]
        r = await c.post(f"{url}/v1/completions", json={"model": self.models[url], "prompt": PROMPT,
                                                        "max_tokens": max_tokens, "ignore_eos": True,
                                                        "temperature": 0.0})
        with self.lock:
            self.ok += r.status_code == 200

    def probe(self, url: str, max_tokens: int) -> float:
        """Seconds one request of ``max_tokens`` takes alone: the fastest of PROBES, timed after a first
        one that pays the server's one-off costs (all count among the N).  One slow probe (a stall of
        the shared machine) sized the bursts too short and the queue too brief (2026-12-03)."""
        async def main() -> float:
            async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as c:
                await self.one(c, url, max_tokens)
                took = []
                for _ in range(PROBES):
                    t = time.time()
                    await self.one(c, url, max_tokens)
                    took.append(time.time() - t)
                return min(took)
        return asyncio.run(main())

    def run(self, schedule: list[tuple[float, str, int]], t0: float) -> threading.Thread:
        async def main() -> None:
            # a fresh connection per request: a kept-alive one the server closes reads as a lost request
            async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as c:
                tasks = []
                for at, url, max_tokens in sorted(schedule):
                    await asyncio.sleep(max(0.0, t0 + at - time.time()))
                    tasks.append(asyncio.create_task(self.one(c, url, max_tokens)))
                await asyncio.gather(*tasks)

        th = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        th.start()
        return th


def _in_flight(doc: dict, url: str) -> float:
    i = next(i for i in doc["instances"] if i["url"] == url)
    return (i.get("running") or 0) + (i.get("waiting") or 0)


def _schedule(sender: Sender, a: str, b: str) -> list[tuple[float, str, int]]:
    """Short requests to both, and on ``a`` (max-num-seqs 1) bursts of long fixed-length ones
    (ignore_eos): sized from a probe so that each burst keeps requests waiting about QUEUE_S."""
    # Timed at the burst's own length: a 200-token probe (0.26 s on CI, 2026-12-07) scaled linearly to
    # 880 tokens sized bursts of 14 that queued no request past 5 s (a request's time is not in
    # proportion to its tokens).
    took = sender.probe(a, LONG)
    assert sender.ok == 1 + PROBES, "the probe requests failed: see the server's log under the state dir's vllm-logs"
    burst = int(min(40, max(3, math.ceil(QUEUE_S / took) + 1)))
    print(f"probe: {LONG} tokens in {took:.2f} s; bursts of {burst} x {LONG} tokens on the saturated server")
    out = [(float(t), a, 4) for t in range(0, 96, 4)] + [(float(t), b, 4) for t in range(0, 48, 6)]
    out += [(t + 0.1 * (k + 1), a, LONG) for t in (12, 34) for k in range(burst)]
    out += [(70 + d, a, 4) for d in (0.1, 0.2, 0.3)]
    return out


def _share_warmups(src: Ctx, dst: Ctx) -> None:
    """What the warmup run recorded in ``src``'s keys, in ``dst``'s (``warming`` first: a run records
    its sends before it leaves that set, and the signals step reads them in that order)."""
    for kind in ("warming", "warmed", "warmup-done"):
        a, b = f"{src.prefix}:{kind}:vdep", f"{dst.prefix}:{kind}:vdep"
        if src.r.exists(a):
            src.r.copy(a, b, replace=True)
        else:
            src.r.delete(b)


def _round(views: list[Ctx]) -> list[dict]:
    """One signals round of every view (the first one warms; the others read its records)."""
    for v in views[1:]:
        _share_warmups(views[0], v)
    return [signals.step(v, "vdep").doc for v in views]


def _drive(views: list[Ctx], scaler, local, sender: Sender, schedule, b: str) -> tuple[bool, list]:
    """Run the window: warmup to b at 14 s, a's scrape failing 56-68 s, b scaled in once idle
    after 72 s; returns whether a round saw requests waiting, and the warmup run's outcome."""
    t0 = time.time() + 1
    th = sender.run(schedule, t0)
    outcome: list = []
    warm = threading.Thread(target=lambda: outcome.append(warmup_run.step(
        views[0], "vdep", urls=[b], requests=4, concurrency=2, duration_s=15)), daemon=True)
    stopped = scaled_in = False
    saw_queue = False
    stopped_at = 0.0
    while th.is_alive() or time.time() < t0 + 100 or stopped is True:
        t = time.time() - t0
        if t >= 14 and not warm.is_alive() and warm.ident is None:
            warm.start()
        # a's scrape fails for a few rounds: stopped at the first round from 56 s, for 12 s from then (a
        # round under CI load once spanned 56-68 s whole, and a window tied to the clock was never hit)
        if t >= 56 and stopped is False:
            os.kill(local.servers[0].pid, signal.SIGSTOP)
            stopped, stopped_at = True, t
        if stopped is True and t >= stopped_at + 12:
            os.kill(local.servers[0].pid, signal.SIGCONT)
            stopped = None
        docs = _round(views)
        saw_queue = saw_queue or any((i.get("waiting") or 0) > 0 for d in docs for i in d["instances"])
        if (t >= 72 and stopped is None and not scaled_in and not warm.is_alive()
                and all(_in_flight(d, b) == 0 for d in docs)):
            scaler.scale_to(1, "test scale-in")  # b leaves, its last requests already read
            scaled_in = True
        time.sleep(5)
    assert scaled_in and stopped is None and warm.ident is not None, (scaled_in, stopped)
    return saw_queue, outcome


def _views(tmp_path, redis_client, key_prefix, redis_server_url, prom: Prometheus) -> list[Ctx]:
    """The scrape view, then the Prometheus view, of one deployment on one fleet."""
    port, out = free_port(), []
    for name, spec, prefix in (("scrape", "{source: scrape}", key_prefix),
                               ("prom", f"{{source: prometheus, prometheus_url: '{prom.url}', "
                                        "selector: 'job=\"vllm\"'}", f"{key_prefix}:prom")):
        deps = tmp_path / f"deployments-{name}.yaml"
        deps.write_text(DEPLOYMENTS.format(python=VLLM_PY, port=port, signals=spec))
        out.append(Ctx(load_settings(redis_url=redis_server_url, key_prefix=prefix, deployments_file=deps,
                                     state_dir=tmp_path / "state"), WorkerOptions(simulate=False), redis_client))
    return out


def _check_window(ctx: Ctx, source: str, sender: Sender, n_sent: int) -> None:
    """The stored arrivals of the window's minutes: exactly what was sent, no zero, no spike, the
    failed scrape's minutes marked incomplete."""
    frame = ctx.store.frame("vdep")
    minute = frame.index.as_unit("ns").asi8 // 60_000_000_000
    first, last_m = int(min(sender.sent_at) // 60), int(max(sender.sent_at) // 60)
    window = frame[(minute >= first) & (minute <= last_m)]
    assert round(float(frame["requests"].sum()), 6) == n_sent, (source, frame)
    sent = {m: sum(1 for s in sender.sent_at if int(s // 60) == m) for m in range(first, last_m + 1)}
    assert (window["requests"] > 0).all(), (source, frame)
    assert float(window["requests"].max()) <= 1.5 * max(sent.values()), (source, frame, sent)
    assert (frame["coverage"] < 1).any(), (source, frame)  # the minutes of the failed scrape


@NEEDS_PROMETHEUS
def test_real_servers_arrivals_sum_to_what_was_sent(tmp_path, redis_client, key_prefix, redis_server_url):
    prom = Prometheus(tmp_path)
    views = _views(tmp_path, redis_client, key_prefix, redis_server_url, prom)
    scaler = views[0].scaler("vdep").inner  # built afresh from the state file at each call, as the loop does
    scaler.scale_to(2, "test")
    try:
        local = scaler.make()
        prom.targets(local.urls())  # the fleet Prometheus discovers
        # the loop sees both launches booting: it measures their launch-to-ready
        assert all({i["state"] for i in d["instances"]} == {"booting"} for d in _round(views))
        asyncio.run(local.wait_ready(timeout_s=400))
        a, b = local.urls()
        ready = time.time()
        while any(i["state"] == "booting" for d in _round(views) for i in d["instances"]):
            time.sleep(1)  # Prometheus scrapes a server a second after it is up
        took = [s.started_wall for s in local.servers]
        for v in views:
            used = lead.resolve(v, "vdep")
            assert used.source == "measured launches"
            assert min(ready - t for t in took) / 60 <= used.cold_start_min <= (time.time() - min(took)) / 60
        sender = Sender()
        schedule = _schedule(sender, a, b)
        before = httpx.get(f"{a}/metrics", timeout=60).text
        saw_queue, warmed = _drive(views, scaler, local, sender, schedule, b)
        bound, queued = waited_longer_than(before, httpx.get(f"{a}/metrics", timeout=60).text, 5.0)
        print(f"{queued} requests waited over {bound} s on the saturated server; a round saw them: {saw_queue}")
        while time.time() % 60 > 55 or any(d["running"] for d in _round(views)):
            time.sleep(2)
        time.sleep(61 - time.time() % 60)
        last = _round(views)  # a round in the next minute: the window's minutes are complete
        for v in views:
            ingest.step(v, "vdep")
    finally:
        scaler.scale_to(0, "test end")
        prom.stop()
    assert [d["source"] for d in last] == ["scrape", "prometheus"]
    # The queue existed through at least one round (5 s apart), by the server's own record.  Whether
    # a round's /metrics read caught it is timing: under load that server answered /metrics late.
    assert queued >= 2, f"only {queued} requests waited over {bound} s: the server was not saturated"
    assert sender.ok == len(schedule) + 1 + PROBES  # every request answered (the probes too)
    # The warmup's completed requests were recorded for both views (the exact sum below proves they
    # were taken out); any it cancelled at its deadline were not, as the server never counts them.
    (res,) = warmed[0].results
    print(f"warmup to {b}: {res}")
    assert res["completed"] >= 1, res
    for v in views:
        assert float(v.r.hget(f"{v.prefix}:warmup-done:vdep", b) or 0) == res["completed"]
    for v, source in zip(views, ("scrape", "prometheus")):
        _check_window(v, source, sender, sender.ok)
