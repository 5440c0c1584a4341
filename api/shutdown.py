"""A request cut short by the server stopping answers 503 with Retry-After, never 500.

On SIGTERM uvicorn stops accepting connections, lets open requests run for its graceful
timeout (``warmcast api serve`` gives 3 s, so the process stops promptly) and then cancels
them.  A cancelled request that had not answered yet, typically an upload whose body was still
arriving, used to reach uvicorn as an exception and go out as 500 Internal Server Error
(issue 31).  Nothing it would have written is half-stored: a route runs only once its body is
whole and writes in one transaction (an uploaded log is renamed into place whole), so a request
cut while its body arrived stored nothing, and one cut while its route ran in a worker thread
stores all or nothing; writes are idempotent, so the client may simply retry.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

RETRY_AFTER_S = 5  # about the time a restarted replica needs to answer again

Message = dict[str, Any]


class ShutdownMiddleware:
    """Outermost ASGI layer: a cancelled request that has not started its response gets 503."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if started:
                raise  # half a response is out: only closing the connection says it is cut
            await _unavailable(send)  # the task ends here, its cancellation answered


async def _unavailable(send: Callable[[Message], Awaitable[None]]) -> None:
    body = json.dumps({"detail": "the server is shutting down and could not finish this request: "
                                 f"retry in {RETRY_AFTER_S} s"}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", str(RETRY_AFTER_S).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
