"""The hot routes' body cache: one render for many pollers, a new one when the data or the time says so."""
from __future__ import annotations

import asyncio
import threading
import time

from api.hot import Rendered


def test_concurrent_requests_share_one_render_and_a_new_stamp_renders_again():
    calls = []
    gate = threading.Event()

    def render() -> bytes:
        gate.wait(5)  # hold the first render until every request has arrived
        calls.append(1)
        return f"body {len(calls)}".encode()

    async def scenario() -> tuple[list[bytes], bytes, bytes]:
        cache = Rendered(ttl_s=60)
        tasks = [asyncio.create_task(cache.get("k", render, stamp=b"v1")) for _ in range(20)]
        await asyncio.sleep(0.05)
        gate.set()
        bodies = await asyncio.gather(*tasks)
        same = await cache.get("k", render, stamp=b"v1")
        changed = await cache.get("k", render, stamp=b"v2")
        return bodies, same, changed

    bodies, same, changed = asyncio.run(scenario())
    assert set(bodies) == {b"body 1"} and same == b"body 1" and changed == b"body 2" and len(calls) == 2


def test_a_stale_body_is_answered_while_one_render_replaces_it_and_keys_are_bounded():
    n = iter(range(1000))
    render = lambda: str(next(n)).encode()  # noqa: E731 - each call a new body

    async def scenario() -> tuple[list[bytes], int]:
        cache = Rendered(ttl_s=0.05, stale_s=0.5, max_keys=3)
        seen = [await cache.get("k", render)]
        time.sleep(0.06)  # past ttl, within stale_s: the old body now, a new one rendered behind it
        seen += [await cache.get("k", render), await cache.get("k", render)]
        await asyncio.sleep(0.2)
        seen.append(await cache.get("k", render))
        time.sleep(0.6)  # past stale_s: this request waits for its own render
        seen.append(await cache.get("k", render))
        for key in range(10):
            await cache.get(key, render)
        return seen, len(cache._bodies)

    seen, kept = asyncio.run(scenario())
    assert seen == [b"0", b"0", b"0", b"1", b"2"] and kept == 3
