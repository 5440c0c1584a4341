"""Everything a route needs, in one place: settings, stores, fleet, auth, limits.

Routes receive an :class:`ApiContext` through ``Depends(get_ctx)``; nothing else
in ``api/`` opens a Redis connection or reads the settings.  HTTP errors are made
here and in ``api/errors.py`` only.
"""
from __future__ import annotations

import asyncio

import hmac
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.exceptions import HTTPException
from starlette.concurrency import run_in_threadpool

from warmcast.config.deployments import Deployment, DeploymentsFile, check_deployment_name
from warmcast.errors import NotFoundError
from warmcast.config.settings import Settings, load_settings
from warmcast.state import StateStore
from warmcast.store import LoadStore


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


@dataclass(frozen=True)
class ApiConfig:
    """API-only knobs (the shared Settings forbid unknown keys, so these read WARMCAST_API_* directly)."""

    max_body_bytes: int = 1 << 20            # JSON bodies
    max_upload_bytes: int = 64 << 20         # uploaded logs for what-if backtests
    max_observations: int = 20_000           # rows in one push
    forecast_max_age_s: int = 600            # /readyz: newest forecast must be younger
    plan_max_age_s: int = 300                # older plan/forecast: KEDA and /metrics stop serving it (api/staleness)
    cache_ttl_s: float = 60.0                # on-demand forecasts are reused this long
    deadline_s: float = 20.0                 # longest a request waits for a computation (then 503)

    @classmethod
    def from_env(cls) -> "ApiConfig":
        d = cls()
        return cls(
            max_body_bytes=_env_int("WARMCAST_API_MAX_BODY_BYTES", d.max_body_bytes),
            max_upload_bytes=_env_int("WARMCAST_API_MAX_UPLOAD_BYTES", d.max_upload_bytes),
            max_observations=_env_int("WARMCAST_API_MAX_OBSERVATIONS", d.max_observations),
            forecast_max_age_s=_env_int("WARMCAST_API_FORECAST_MAX_AGE_S", d.forecast_max_age_s),
            plan_max_age_s=_env_int("WARMCAST_API_PLAN_MAX_AGE_S", d.plan_max_age_s),
            deadline_s=float(os.environ.get("WARMCAST_API_DEADLINE_S") or d.deadline_s),
        )


@dataclass
class ApiContext:
    """The service's edges, opened lazily so the app starts even while Redis is down."""

    settings: Settings
    config: ApiConfig
    _redis: redis.Redis | None = None
    _fleet: DeploymentsFile | None = None
    cache: dict[Any, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)        # one forecast fit at a time
    inflight: dict[Any, Any] = field(default_factory=dict)              # computations running (single flight)
    flight_lock: threading.Lock = field(default_factory=threading.Lock)
    computations: int = 0                                               # forecasts computed by this process

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            from warmcast.runtime import redis_client

            self._redis = redis_client(self.settings)
        return self._redis

    @property
    def store(self) -> LoadStore:
        return LoadStore(self.redis, self.settings.key_prefix, self.settings.retention_days)

    @property
    def state(self) -> StateStore:
        return StateStore(self.redis, self.settings.key_prefix)

    @property
    def fleet(self) -> DeploymentsFile:
        if self._fleet is None:
            from warmcast.runtime import load_fleet

            self._fleet = load_fleet(self.settings)
        return self._fleet

    @property
    def data_dir(self) -> Path:
        return Path(self.settings.state_dir).resolve()

    def configured(self, name: str) -> Deployment | None:
        for d in self.fleet.deployments:
            if d.name == name:
                return d
        return None

    def known_names(self) -> list[str]:
        """Configured deployments plus any with stored load (reads work for both)."""
        names = {d.name for d in self.fleet.deployments}
        names.update(self.store.deployments())
        return sorted(names)


def build_context(settings: Settings | None = None, config: ApiConfig | None = None) -> ApiContext:
    return ApiContext(settings=settings or load_settings(), config=config or ApiConfig.from_env())


async def get_ctx(request: Request) -> ApiContext:
    return request.app.state.ctx


# --------------------------------------------------------------------------- auth

def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _matches(token: str, *expected: str | None) -> bool:
    return any(e and hmac.compare_digest(token.encode(), e.encode()) for e in expected)


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


_bearer_scheme = HTTPBearer(auto_error=False, description="Authorization: Bearer <token>")


async def require_write(request: Request, ctx: ApiContext = Depends(get_ctx),
                  _doc: HTTPAuthorizationCredentials | None = Security(_bearer_scheme)) -> str:
    """Every state-changing route: the bearer token must equal settings.api_token.

    With no api_token configured, mutating routes stay closed (403): an open write
    API must be a deliberate choice, never a default."""
    token = _bearer(request)
    if token is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <api_token>)", headers=_CHALLENGE)
    if not ctx.settings.api_token:
        raise HTTPException(403, "mutating routes are disabled: no api_token configured (WARMCAST_API_TOKEN)")
    if not _matches(token, ctx.settings.api_token):
        raise HTTPException(403, "bearer token is not valid for this route")
    return "api"


async def require_read(request: Request, ctx: ApiContext = Depends(get_ctx),
                       _doc: HTTPAuthorizationCredentials | None = Security(_bearer_scheme)) -> None:
    """Reads are open unless settings.api_read_token is set; then it (or the write token) is needed."""
    check_read(request, ctx)


def check_read(request: Request, ctx: ApiContext) -> None:
    """The read-token rule as a plain call, for hot routes that skip dependency injection."""
    if not ctx.settings.api_read_token:
        return
    token = _bearer(request)
    if token is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <api_read_token>)", headers=_CHALLENGE)
    if not _matches(token, ctx.settings.api_read_token, ctx.settings.api_token):
        raise HTTPException(403, "bearer token is not valid for reads")


# --------------------------------------------------------------------------- deployments

async def known_deployment(deployment: str, ctx: ApiContext = Depends(get_ctx)) -> str:
    """A path's deployment must be configured or have stored load; anything else is 404."""
    return check_known(deployment, ctx)


KNOWN_TTL_S = 1.0  # a known name is re-checked at most once a second (saves a Redis call per request)


def check_known(deployment: str, ctx: ApiContext) -> str:
    seen = ctx.cache.get(("known", deployment))
    if seen is not None and time.monotonic() - seen < KNOWN_TTL_S:
        return deployment
    try:
        check_deployment_name(deployment)
    except Exception:
        raise NotFoundError(f"unknown deployment {deployment!r}") from None
    if ctx.configured(deployment) is None and deployment not in ctx.store.deployments():
        raise NotFoundError(f"unknown deployment {deployment!r}; known: {ctx.known_names()}")
    ctx.cache[("known", deployment)] = time.monotonic()  # only known names: the cache stays bounded
    return deployment


KNOWN_STALE_S = 5.0  # a name stored-but-not-configured may be answered from a check this old while one re-checks


async def check_known_async(deployment: str, ctx: ApiContext) -> str:
    """``check_known`` for routes on the event loop, which never waits on Redis for a name it knows.

    A configured name needs no I/O and is checked inline. A name known only from the store is
    re-checked in a thread at most once per KNOWN_TTL_S, and until KNOWN_STALE_S the previous
    check answers meanwhile: when the re-check was awaited, every request arriving during it
    hopped to the thread pool too, and on a busy machine that made the route's p99."""
    key = ("known", deployment)
    seen = ctx.cache.get(key)
    age = time.monotonic() - seen if seen is not None else None
    if age is not None and age < KNOWN_TTL_S:
        return deployment
    if ctx.configured(deployment) is not None:
        return check_known(deployment, ctx)
    if age is not None and age < KNOWN_STALE_S:
        if key not in ctx.inflight:
            ctx.inflight[key] = asyncio.ensure_future(_recheck_known(deployment, ctx, key))
        return deployment
    return await run_in_threadpool(check_known, deployment, ctx)


async def _recheck_known(deployment: str, ctx: ApiContext, key: tuple) -> None:
    try:
        await run_in_threadpool(check_known, deployment, ctx)
    except Exception:  # noqa: BLE001 - a name gone from the store is answered 404 once KNOWN_STALE_S passes
        pass
    finally:
        ctx.inflight.pop(key, None)


async def configured_deployment(deployment: str, ctx: ApiContext = Depends(get_ctx)) -> Deployment:
    """Routes that act on a deployment need its configuration (profiles, capacity)."""
    dep = ctx.configured(deployment)
    if dep is None:
        check_known(deployment, ctx)  # 404 when not even stored
        raise NotFoundError(f"deployment {deployment!r} has stored load but is not configured in the "
                            f"deployments file; configured: {[d.name for d in ctx.fleet.deployments]}")
    return dep


class WriteGuard:
    """Token check for state-changing requests before their body is read or parsed.

    The route dependency (``require_write``) makes the same check and documents it in
    OpenAPI; this copy runs first so a request without a valid token gets 401/403 even
    when its body is malformed or oversized (FastAPI parses bodies before dependencies)."""

    METHODS = {"POST", "PUT", "PATCH", "DELETE"}

    def __init__(self, app, ctx: ApiContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in self.METHODS and scope["path"].startswith("/v1/"):
            request = Request(scope)
            try:
                await require_write(request, self.ctx)
            except HTTPException as err:
                from fastapi.responses import JSONResponse

                resp = JSONResponse({"detail": err.detail}, status_code=err.status_code, headers=err.headers)
                return await resp(scope, receive, send)
        return await self.app(scope, receive, send)
