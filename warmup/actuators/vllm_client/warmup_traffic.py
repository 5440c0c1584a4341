"""Warmup traffic: requests shaped like a deployment's real traffic, sent to one instance.

:class:`WarmupSpec` says how many, how many at once and for how long; :func:`send_warmup`
sends them and returns a :class:`WarmupResult`.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from warmup.actuators.tokens import TokenDistribution
from warmup.actuators.vllm_client.errors import InstanceError


MAX_ERRORS_KEPT = 5


class WarmupTarget(Protocol):
    """What warmup traffic needs of an instance (:class:`VLLMClient` is one): declared here so
    the client can import this module to delegate its ``warmup`` without an import cycle."""

    name: str

    async def model_info(self) -> Any: ...

    async def complete(self, prompt_tokens: int, max_tokens: int, **kwargs: Any) -> Any: ...


class WarmupSpecLike(Protocol):
    """Anything :meth:`WarmupSpec.of` accepts: ``concurrency``, ``duration_s`` and ``count``
    (:class:`WarmupSpec`) or ``requests_per_instance`` (the decision core's ``WarmupDecision``)."""

    concurrency: int
    duration_s: float | None


@dataclass(frozen=True)
class WarmupSpec:
    """Send ``count`` requests (None: as many as fit) with at most ``concurrency`` in flight,
    for at most ``duration_s`` seconds (None: until ``count`` are done)."""

    count: int | None = 8
    concurrency: int = 2
    duration_s: float | None = 60.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.count is None and self.duration_s is None:
            raise ValueError("a warmup needs a count or a duration")

    @classmethod
    def of(cls, source: Any) -> "WarmupSpec":
        """Normalise a WarmupSpec or the core's WarmupDecision (``requests_per_instance``)."""
        if isinstance(source, WarmupSpec):
            return source
        count = getattr(source, "count", None)
        if count is None:
            count = getattr(source, "requests_per_instance", None)
        duration = getattr(source, "duration_s", None)
        return cls(count=int(count) if count is not None else None, concurrency=max(1, int(source.concurrency)),
                   duration_s=float(duration) if duration else None)


@dataclass
class WarmupResult:
    instance: str
    sent: int = 0
    completed: int = 0
    failed: int = 0
    aborted: int = 0
    stopped_by: Literal["done", "duration", "abort"] = "done"
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)  # the first few, for the log


class _WarmupRun:
    """One warmup on one instance: a launcher keeps ``concurrency`` requests in flight until
    ``count`` are sent; :meth:`until_stopped` ends it at the duration or on ``abort``."""

    def __init__(self, client: WarmupTarget, spec: WarmupSpec, dist: TokenDistribution,
                 rng: np.random.Generator, request_timeout_s: float) -> None:
        self.client, self.spec, self.dist, self.rng = client, spec, dist, rng
        self.request_timeout_s = request_timeout_s
        self.result = WarmupResult(instance=client.name)
        self.in_flight = asyncio.Semaphore(max(1, int(spec.concurrency)))

    async def send_one(self, prompt_tokens: int, output_tokens: int) -> None:
        result = self.result
        try:
            res = await self.client.complete(prompt_tokens, output_tokens,
                                             rng=np.random.default_rng(self.rng.integers(1 << 31)),
                                             timeout_s=self.request_timeout_s)
        except Exception as err:  # one bad request must not end the warmup (cancellation still does)
            result.failed += 1
            if len(result.errors) < MAX_ERRORS_KEPT:
                result.errors.append(str(err) if isinstance(err, InstanceError)
                                     else f"vLLM instance {self.client.name}: {type(err).__name__}: {err}")
        else:
            result.completed += 1
            result.latencies_s.append(res.latency_s)
            result.prompt_tokens += res.prompt_tokens
            result.completion_tokens += res.completion_tokens
        finally:
            self.in_flight.release()

    async def launch_all(self) -> None:
        """Send until ``count`` are sent; requests in flight when cancelled count as aborted."""
        count, result = self.spec.count, self.result
        tasks: set[asyncio.Task[None]] = set()
        try:
            while count is None or result.sent < count:
                await self.in_flight.acquire()
                (p, o), = self.dist.sample(self.rng, 1)
                result.sent += 1
                t = asyncio.create_task(self.send_one(p, o))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            pending = [t for t in tasks if not t.done()]
            for t in pending:
                t.cancel()
            result.aborted += len(pending)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def until_stopped(self, abort: asyncio.Event | None) -> WarmupResult:
        t0 = time.monotonic()
        deadline = t0 + self.spec.duration_s if self.spec.duration_s is not None else None
        launcher = asyncio.create_task(self.launch_all())
        waiters: list[asyncio.Task[Any]] = [launcher]
        abort_wait = asyncio.create_task(abort.wait()) if abort is not None else None
        if abort_wait:
            waiters.append(abort_wait)
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if launcher not in done:
                self.result.stopped_by = "abort" if abort_wait in done else "duration"
                launcher.cancel()
                await asyncio.gather(launcher, return_exceptions=True)
        finally:
            if not launcher.done():  # our caller was cancelled
                launcher.cancel()
                await asyncio.gather(launcher, return_exceptions=True)
            if abort_wait:
                abort_wait.cancel()
            self.result.elapsed_s = time.monotonic() - t0
        return self.result


async def send_warmup(client: WarmupTarget, spec: WarmupSpecLike, tokens: TokenDistribution, *,
                      abort: asyncio.Event | None = None, seed: int | None = None,
                      request_timeout_s: float = 120.0) -> WarmupResult:
    """Send warmup requests shaped like the deployment's traffic to ``client``.

    Lengths are drawn from ``tokens`` capped to the server's ``max_model_len``.
    Stops when ``spec.count`` requests finished, at ``spec.duration_s``, or
    when ``abort`` is set; requests still in flight then are cancelled (the
    server aborts them when the connection closes) and counted as aborted.
    Cancelling the calling task cancels them too.
    """
    spec = WarmupSpec.of(spec)
    info = await client.model_info()
    dist = tokens.capped(info.max_model_len) if info.max_model_len else tokens
    run = _WarmupRun(client, spec, dist, np.random.default_rng(seed), request_timeout_s)
    return await run.until_stopped(abort)
