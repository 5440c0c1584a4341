"""The FastAPI application: ``uvicorn --factory api.app:create_app``.

Routes are versioned under ``/v1``; ``/healthz``, ``/readyz``, ``/metrics`` and the
dashboard at ``/`` sit at the root where their tools expect them.
"""
from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path

import pandas as pd

from fastapi import FastAPI
from fastapi import Response
from fastapi.responses import FileResponse, HTMLResponse

from api import service
from api.deps import ApiConfig, ApiContext, WriteGuard, build_context
from api.errors import BodyLimitMiddleware, install_error_handlers
from api.hot import HOT_TTL_S, Rendered
from api.schemas import HealthOut
from api.shutdown import ShutdownMiddleware
from warmcast.config.settings import Settings

STATIC = Path(__file__).resolve().parent / "static"


def create_app(settings: Settings | None = None, config: ApiConfig | None = None) -> FastAPI:
    ctx = build_context(settings, config)
    app = FastAPI(title="warmcast API", version="1.0.0", docs_url=None, redoc_url=None,
                  description="Load forecasts, capacity plans and autoscaler metrics for vLLM deployments. "
                              "Mutating routes need `Authorization: Bearer <api_token>`; reads need "
                              "`api_read_token` when it is configured.")
    app.state.ctx = ctx
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_body=ctx.config.max_body_bytes, max_upload=ctx.config.max_upload_bytes)
    app.add_middleware(WriteGuard, ctx=ctx)  # no token, no body read
    app.add_middleware(ShutdownMiddleware)  # added last = runs first: a request cut by SIGTERM gets 503

    from api.advice import router as advice_router
    from api.fleet import router as fleet_router
    from api.alerts import history as alert_history, receiver as alert_receiver
    from api.autoscale import keda_router, metrics_router
    from api.gpu_plan import router as gpu_plan_router
    from api.routes import hot, read, write

    # Routes are matched in the order they are added, one by one: the ones pollers hit come first.
    _health_routes(app, ctx)
    app.include_router(metrics_router(ctx))
    app.include_router(keda_router(ctx))
    app.include_router(hot)
    app.include_router(read)
    app.include_router(write)
    app.include_router(gpu_plan_router)
    app.include_router(advice_router)
    app.include_router(fleet_router)
    app.include_router(alert_receiver)
    app.include_router(alert_history)
    _dashboard_routes(app)
    _docs_routes(app)
    app.router.on_startup.append(_freeze_heap)
    return app


def _freeze_heap() -> None:
    """Move the objects alive after start-up (numpy, pandas, the app) out of the collector's
    reach: request handling allocates a lot, and every full collection would walk them all."""
    import gc

    gc.collect()
    gc.freeze()


_HEALTHZ = b'{"status":"ok","checks":{}}'


def _health_routes(app: FastAPI, ctx: ApiContext) -> None:
    # Probes run on the event loop with no dependencies: kubelet polls them, and a thread-pool
    # hop per probe made /healthz dearer than a forecast.
    @app.get("/healthz", response_model=HealthOut, tags=["health"], summary="The process answers")
    async def healthz() -> Response:
        return Response(_HEALTHZ, media_type="application/json")

    # A probe's answer is at most HOT_TTL_S old (no stale answers past it): one Redis round trip
    # per second, not one per probe, made on the loop like the forecast route's read.
    answers = Rendered(stale_s=HOT_TTL_S, inline=True)

    def render() -> tuple[int, bytes]:
        body = readiness(ctx)
        return 200 if body.status == "ready" else 503, body.model_dump_json().encode()

    @app.get("/readyz", response_model=HealthOut, tags=["health"], responses={503: {"model": HealthOut}},
             summary="Redis reachable and every configured deployment has a fresh forecast")
    async def readyz() -> Response:
        status, body = await answers.get("readyz", render)
        return Response(body, status_code=status, media_type="application/json")


def readiness(ctx: ApiContext) -> HealthOut:
    """One Redis round trip: the stored forecasts of every configured deployment (it is the ping too)."""
    names = [d.name for d in ctx.fleet.deployments]
    try:
        raws = ctx.redis.mget([ctx.state.key("forecast", n) for n in names]) if names else [ctx.redis.ping()]
    except Exception as err:  # noqa: BLE001 - any failure means not ready, and says why
        return HealthOut(status="not ready", checks={"redis": f"unreachable: {type(err).__name__}"})
    checks: dict = {"redis": "ok"}
    limit = ctx.config.forecast_max_age_s
    ready = True
    now = time.time()
    for name, raw in zip(names, raws):
        if raw:
            made = _made_at(raw)
            age = None if made is None else now - made
        else:  # or one the API computed
            doc = ctx.cache.get(("latest", name))
            age = service.forecast_age_s(doc) if doc else None
        fresh = age is not None and age <= limit
        ready &= fresh
        checks[f"forecast:{name}"] = (f"{age:.0f} s old" if age is not None else "none") + \
            ("" if fresh else f" (limit {limit} s)")
    return HealthOut(status="ready" if ready else "not ready", checks=checks)


@lru_cache(maxsize=256)
def _made_at(raw: bytes) -> float | None:
    """When a stored forecast document was made (epoch s), parsed once per document, not per probe."""
    stamp = json.loads(raw).get("created_at")
    return pd.Timestamp(stamp).timestamp() if stamp else None  # stored naive in UTC


def _dashboard_routes(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/chart.js", include_in_schema=False)
    def chart_js() -> FileResponse:
        return FileResponse(STATIC / "chart.js", media_type="application/javascript")


def _docs_routes(app: FastAPI) -> None:
    """Swagger UI at /docs and ReDoc at /redoc from assets served by the app itself, as FastAPI's
    "custom docs UI static assets" recipe does: GPU clusters are often air-gapped, and the
    default pages load their scripts from a CDN (blank offline). The files come from the
    fastapi-offline wheel (MIT; Swagger UI is Apache-2.0, ReDoc MIT)."""
    import fastapi_offline
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
    from fastapi.staticfiles import StaticFiles

    assets = Path(fastapi_offline.__file__).resolve().parent / "static"
    app.mount("/static/docs", StaticFiles(directory=assets), name="docs-assets")
    redirect = app.swagger_ui_oauth2_redirect_url

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url=redirect, swagger_js_url="/static/docs/swagger-ui-bundle.js",
                                   swagger_css_url="/static/docs/swagger-ui.css",
                                   swagger_favicon_url="/static/docs/favicon.png")

    @app.get(redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=app.openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url="/static/docs/redoc.standalone.js",
                              redoc_favicon_url="/static/docs/favicon.png", with_google_fonts=False)
