"""Bodies for the routes pollers hit (probes, scrapes, autoscalers): rendered once, served many times.

Kubelet, Prometheus and KEDA ask far more often than the stored data changes (the workers
write once a minute). The hot routes run on the event loop, skip FastAPI's dependency
injection and reuse a rendered body while it is fresh, so they stay the cheapest routes of
the service instead of the dearest. A body is rendered in the thread pool (it may read Redis
and shape numbers), one render per key at a time: fifty pollers arriving together make one.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any, Callable, Hashable

from starlette.concurrency import run_in_threadpool

HOT_TTL_S = 1.0  # as old as the forecast route's copy of the stored forecast may be (service.RAW_TTL_S)


class Rendered:
    """Rendered bodies by key, reused while younger than ``ttl_s`` and made from the same ``stamp``.

    ``stamp`` is whatever the body was made from that a caller can read cheaply (the raw stored
    documents); a different stamp means the data changed, so the body is rendered again at once."""

    def __init__(self, ttl_s: float = HOT_TTL_S, max_keys: int = 256) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys  # query parameters are part of keys: bound what a client can fill
        self._bodies: OrderedDict[Hashable, tuple[float, Any, bytes]] = OrderedDict()
        self._locks: dict[Hashable, asyncio.Lock] = {}

    def _fresh(self, key: Hashable, stamp: Any) -> bytes | None:
        hit = self._bodies.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s and hit[1] == stamp:
            return hit[2]
        return None

    async def get(self, key: Hashable, render: Callable[[], bytes], stamp: Any = None) -> bytes:
        body = self._fresh(key, stamp)
        if body is not None:
            return body
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            body = self._fresh(key, stamp)  # another request rendered it while this one waited
            if body is None:
                body = await run_in_threadpool(render)
                self._bodies[key] = (time.monotonic(), stamp, body)
                self._bodies.move_to_end(key)
                while len(self._bodies) > self.max_keys:
                    old, _ = self._bodies.popitem(last=False)
                    self._locks.pop(old, None)
        return body
