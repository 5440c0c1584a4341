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
    """Rendered bodies (or any answer) by key, reused while younger than ``ttl_s`` and made from the same ``stamp``.

    ``stamp`` is whatever the body was made from that a caller can read cheaply (the raw stored
    documents); a different stamp means the data changed, so the body is rendered again at once.
    A body past ``ttl_s`` but younger than ``stale_s`` is still answered while one request's
    render replaces it in the background: no poller waits for a render once the first is done,
    and a failing render (Redis down) is answered as an error once ``stale_s`` has passed."""

    def __init__(self, ttl_s: float = HOT_TTL_S, stale_s: float = 5 * HOT_TTL_S, max_keys: int = 256,
                 inline: bool = False) -> None:
        self.ttl_s, self.stale_s = ttl_s, stale_s
        # inline: render on the event loop. For renders of a millisecond (one Redis read): in the
        # thread pool they wait for the GIL behind the busy loop, and every waiting poller with them.
        self.inline = inline
        self.max_keys = max_keys  # query parameters are part of keys: bound what a client can fill
        self._bodies: OrderedDict[Hashable, tuple[float, Any, Any]] = OrderedDict()
        self._locks: dict[Hashable, asyncio.Lock] = {}
        self._refreshing: dict[Hashable, asyncio.Task] = {}

    def _usable(self, key: Hashable, stamp: Any, max_age: float) -> Any:
        hit = self._bodies.get(key)
        if hit is not None and time.monotonic() - hit[0] < max_age and hit[1] == stamp:
            return hit[2]
        return None

    async def get(self, key: Hashable, render: Callable[[], Any], stamp: Any = None) -> Any:
        body = self._usable(key, stamp, self.ttl_s)
        if body is not None:
            return body
        body = self._usable(key, stamp, self.stale_s)
        if body is not None:
            if key not in self._refreshing:
                self._refreshing[key] = asyncio.create_task(self._refresh(key, render, stamp))
            return body
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            body = self._usable(key, stamp, self.ttl_s)  # another request rendered it while this one waited
            if body is None:
                body = render() if self.inline else await run_in_threadpool(render)
                self._store(key, stamp, body)
        return body

    async def _refresh(self, key: Hashable, render: Callable[[], Any], stamp: Any) -> None:
        try:
            self._store(key, stamp, await run_in_threadpool(render))
        except Exception:  # noqa: BLE001 - the next request renders in the open and answers the error
            self._bodies.pop(key, None)
        finally:
            self._refreshing.pop(key, None)

    def _store(self, key: Hashable, stamp: Any, body: Any) -> None:
        self._bodies[key] = (time.monotonic(), stamp, body)
        self._bodies.move_to_end(key)
        while len(self._bodies) > self.max_keys:
            old, _ = self._bodies.popitem(last=False)
            self._locks.pop(old, None)
