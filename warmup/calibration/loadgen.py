"""The HTTP load generator of calibration: warmcast's own async vLLM client, open loop.

Sends a step's schedule (:func:`warmup.calibration.steps.schedule`) as streamed
completions, each at its arrival time whatever the server's backlog (open loop, as
``vllm bench serve``), and records time to first token and to the end.  Requests still
running ``drain_s`` after the last arrival are cancelled (the server aborts them on the
closed connection) and recorded as unfinished, so an overloaded step cannot look good
by leaving its slowest requests out.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import aiohttp
import httpx
import numpy as np

from warmup.actuators.vllm_client import InstanceError, VLLMClient
from warmup.actuators.vllm_client.client import CompletionResult
from warmup.calibration.search import Scenario
from warmup.calibration.steps import Arrival, Record


class LoadClient(VLLMClient):
    """The vLLM client with its timed request on aiohttp, as ``vllm bench serve`` sends them.

    On a small machine httpx's per-chunk overhead in streamed responses was counted as the
    server's latency: beside ``vllm bench serve`` on one server at one rate, TTFT P50 read 17%
    and P99 60% higher (bench/calibrate.py).  Everything else (model, version, errors) stays on
    the shared client."""

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await super().aclose()

    def _sessions(self) -> aiohttp.ClientSession:
        if self._session is None:  # no pool limit: a queue on our side would read as the server's
            self._session = aiohttp.ClientSession(self.base_url, connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def complete_stream(self, prompt_tokens: int, max_tokens: int, *, rng: np.random.Generator | None = None,
                              timeout_s: float = 120.0) -> CompletionResult:
        """One streamed completion timed to its first chunk and its end (no retry: failures count)."""
        body = await self.stream_body(prompt_tokens, max_tokens, rng)
        t0, ttft, usage = time.perf_counter(), None, {}
        try:
            async with self._sessions().post("/v1/completions", json=body,
                                             timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                if r.status >= 400:
                    raise InstanceError(self.name, f"POST /v1/completions -> HTTP {r.status}: "
                                                   f"{(await r.read())[:300]!r}", status=r.status)
                async for event in _sse_events(r.content):
                    if ttft is None and event.get("choices"):  # no tokenizer: text may be empty
                        ttft = time.perf_counter() - t0
                    usage = event.get("usage") or usage
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as err:
            raise InstanceError(self.name, f"streamed completion failed: {type(err).__name__}: {err}") from None
        return CompletionResult(time.perf_counter() - t0, int(usage.get("prompt_tokens", prompt_tokens)),
                                int(usage.get("completion_tokens", 0)), ttft)


async def _sse_events(content: aiohttp.StreamReader):
    """The JSON objects of a server-sent event stream (``data: {...}`` blocks), up to ``[DONE]``."""
    buf = b""
    async for chunk in content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            for line in block.splitlines():
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    yield json.loads(line[6:])


def load_client(url: str, model: str | None = None, timeout_s: float = 300.0) -> LoadClient:
    """A client whose connection pools never queue requests on our side (that would be
    counted as the server's latency)."""
    transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
    return LoadClient(url, model=model, timeout_s=timeout_s, retries=1, transport=transport)


async def _one(client: VLLMClient, a: Arrival, rng: np.random.Generator) -> Record:
    try:
        r = await client.complete_stream(a.prompt, a.output, rng=rng)
    except InstanceError as err:
        return Record(a, False, error=str(err)[:200])
    ttft = (r.ttft_s if r.ttft_s is not None else r.latency_s) * 1000.0
    return Record(a, True, ttft, r.latency_s * 1000.0, r.prompt_tokens, r.completion_tokens)


async def send(client: VLLMClient, arrivals: list[Arrival], *, drain_s: float, seed: int = 0) -> list[Record]:
    """Send every arrival at its time; one record per arrival, in order."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    tasks: list[asyncio.Task] = []
    for a in arrivals:
        delay = t0 + a.at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(client, a, rng)))
    if not tasks:
        return []
    left = t0 + arrivals[-1].at_s + drain_s - time.perf_counter()
    done, pending = await asyncio.wait(tasks, timeout=max(0.0, left))
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [t.result() if t in done else Record(a, False, error=f"unfinished {drain_s:g} s after the last arrival")
            for t, a in zip(tasks, arrivals)]


async def probe(client: VLLMClient, scenario: Scenario, *, concurrency: int, duration_s: float,
                seed: int = 0) -> float:
    """Saturation throughput (completed req/s) with ``concurrency`` requests always outstanding,
    for ``duration_s`` and at least until ``2 * concurrency`` requests completed (at most 5x as long):
    a short probe of long requests would otherwise count only the few that happened to finish."""
    rng = np.random.default_rng(seed)
    shares = np.array([p[0] for p in scenario.parts], float)
    shares /= shares.sum()
    t0 = time.perf_counter()
    end, hard_end = t0 + duration_s, t0 + 5 * duration_s
    finished: list[float] = []

    def going() -> bool:
        now = time.perf_counter()
        return now < end or (len(finished) < 2 * concurrency and now < hard_end)

    async def worker() -> None:
        while going():
            _, prompt, _ = scenario.parts[int(rng.choice(len(shares), p=shares))]
            try:
                await client.complete_stream(prompt, scenario.output, rng=rng, timeout_s=hard_end - t0 + 30)
            except InstanceError:
                await asyncio.sleep(0.2)
                continue
            finished.append(time.perf_counter())

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(finished) / (max(finished) - t0) if finished else math.nan
