"""Map warmcast errors to HTTP, and refuse oversized bodies before they are read.

422 bodies keep FastAPI's validation shape (``detail: [{loc, msg, type}]``) so a
client reads every validation error the same way and the field is always named.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api.staleness import StalePlan
from warmcast.errors import InputError, NotFoundError, StateError, WarmcastError


class FieldError(InputError):
    """Bad input tied to one field; ``loc`` is its place ('query', 'horizon')."""

    def __init__(self, loc: tuple[str, ...], msg: str) -> None:
        super().__init__(f"{'.'.join(loc)}: {msg}")
        self.loc = loc
        self.msg = msg


class DeadlineExceeded(WarmcastError):
    """A request waited its deadline for a computation that goes on; the client retries."""

    retry_after_s = 5


_FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*): (.*)$", re.S)


def _input_error(request: Request, err: InputError) -> JSONResponse:
    if isinstance(err, FieldError):
        loc, msg = list(err.loc), err.msg
    else:
        m = _FIELD_PREFIX.match(str(err))
        loc, msg = (["query", m.group(1)], m.group(2)) if m else (_unnamed_loc(request), str(err))
    return JSONResponse({"detail": [{"loc": loc, "msg": msg, "type": "value_error"}]}, status_code=422)


def _unnamed_loc(request: Request) -> list[str]:
    """Where an error naming no field lies: the body, except for a GET or HEAD, which has none (a
    plan or advice refused for what the path's deployment lacks, e.g. no 'gpu:' section or token counts)."""
    if request.method not in ("GET", "HEAD"):
        return ["body"]
    return ["path", "deployment"] if "deployment" in request.path_params else ["query"]


def _conflict(request: Request, err: StateError) -> JSONResponse:
    """The request was well formed; the stored state cannot answer it (yet): 409 with the reason."""
    return JSONResponse({"detail": str(err)}, status_code=409)


def _not_found(request: Request, err: NotFoundError) -> JSONResponse:
    return JSONResponse({"detail": str(err)}, status_code=404)


def _unavailable(request: Request, err: WarmcastError) -> JSONResponse:
    # Other warmcast errors at request time are problems of the service's surroundings
    # (Redis down, workers missing): the client can retry later.
    return JSONResponse({"detail": str(err)}, status_code=503)


def _stale(request: Request, err: StalePlan) -> JSONResponse:
    # 503: KEDA's metrics-api scaler counts a failure and applies its fallback replicas
    return JSONResponse(err.body(), status_code=503)


def _late(request: Request, err: DeadlineExceeded) -> JSONResponse:
    return JSONResponse({"detail": str(err)}, status_code=503, headers={"Retry-After": str(err.retry_after_s)})


def _finite(value: Any) -> Any:
    """``value`` with NaN/Infinity written as strings: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
    """FastAPI's 422, except that a NaN/Infinity the client sent is echoed back as a string
    (rendering it as a number made the 422 itself fail with a 500: finding 7)."""
    return JSONResponse({"detail": _finite(jsonable_encoder(err.errors()))}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(DeadlineExceeded, _late)
    app.add_exception_handler(StalePlan, _stale)
    app.add_exception_handler(InputError, _input_error)
    app.add_exception_handler(StateError, _conflict)   # before InputError's by its class, whatever the order
    app.add_exception_handler(NotFoundError, _not_found)
    app.add_exception_handler(WarmcastError, _unavailable)
    import redis

    app.add_exception_handler(redis.RedisError, lambda r, e: JSONResponse(
        {"detail": f"Redis unavailable: {type(e).__name__}"}, status_code=503))


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """413 for a body over the limit, by Content-Length or by counting a streamed body.

    Uploads (paths ending in ``/upload``) get their own, larger limit."""

    def __init__(self, app, max_body: int, max_upload: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_upload = max_upload

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_upload if scope["path"].endswith("/upload") else self.max_body
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > limit
            except ValueError:
                return await _reply(send, 400, "Content-Length is not a number")
            if too_big:
                return await _reply(send, 413, f"request body over the limit of {limit} bytes")
        seen = 0
        started = False
        replaced = False  # our 413 went out: whatever the app sends afterwards is dropped

        async def counted():
            nonlocal seen, replaced
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit and not started and not replaced:
                    replaced = True
                    await _reply(send, 413, f"request body over the limit of {limit} bytes")
                    raise _TooLarge()
            return msg

        async def tracked_send(msg):
            nonlocal started
            if replaced:
                return
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted, tracked_send)
        except Exception:
            if not replaced:
                raise


async def _reply(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
