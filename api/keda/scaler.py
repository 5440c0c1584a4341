"""KEDA external scaler service: the same numbers as ``/v1/keda/{deployment}``, over gRPC.

Trigger metadata (``scalerMetadata`` in the ScaledObject):

- ``deployment``: warmcast deployment name (default: the ScaledObject's name)
- ``metric``: ``desiredReplicas`` (default; target 1 per replica, so KEDA sets that
  many replicas) or ``forecastDemandRpm`` (target = capacity per replica of the profile the
  core's plan has active now x utilisation)
- ``quantile`` (default 0.9), ``lead`` minutes (default: the lead the workers' planner uses:
  P90 of measured launch-to-ready, else the measure-coldstart record, else ``cold_start_min``),
  ``utilisation`` (default 1.0)
- ``streamIntervalSeconds`` for StreamIsActive (default 15)
- ``token``: the API's read token, when one is set

Any other key is refused with INVALID_ARGUMENT naming it (a misspelt ``quantil`` was ignored and
the default answered: issue 41), except KEDA's own (``scalerAddress``, its TLS settings), which KEDA
passes along with the rest.

IsActive is true when the number asked for is above zero (scale from/to zero).
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, AsyncIterator

import grpc

from api import service
from api.deps import ApiContext
from api.keda.vendor import externalscaler_pb2 as pb
from api.keda.vendor import externalscaler_pb2_grpc as pb_grpc
from api.staleness import StalePlan
from warmcast.errors import InputError, NotFoundError, WarmcastError
from warmcast.text import shown

METRICS = ("desiredReplicas", "forecastDemandRpm")
READ_KEYS = ("deployment", "metric", "quantile", "lead", "utilisation", "streamIntervalSeconds", "token")
# the external trigger's own metadata and auth parameters: KEDA sends the whole metadata object
KEDA_KEYS = ("scalerAddress", "enableTLS", "unsafeSsl", "tlsCertFile", "caCert", "tlsClientCert", "tlsClientKey")


def check_keys(meta: dict[str, str]) -> None:
    """InputError naming every key neither warmcast nor KEDA reads, and the accepted ones."""
    unknown = sorted(set(meta) - set(READ_KEYS) - set(KEDA_KEYS))
    if unknown:
        raise InputError(f"scalerMetadata: unknown key(s) [{', '.join(shown(k, 40) for k in unknown[:10])}]"
                         f"{' and more' if len(unknown) > 10 else ''}; accepted: {list(READ_KEYS)} "
                         f"(and KEDA's own {list(KEDA_KEYS)})")


def _float(meta: dict[str, str], key: str, default: float, lo: float, hi: float) -> float:
    raw = meta.get(key)
    if raw in (None, ""):
        return default
    try:
        v = float(raw)
    except ValueError:
        raise InputError(f"scalerMetadata.{key}: {raw!r} is not a number") from None
    if not lo <= v <= hi:
        raise InputError(f"scalerMetadata.{key}: {v} is outside [{lo}, {hi}]")
    return v


class Unauthenticated(WarmcastError):
    """No token where the API requires one for reads."""


class Forbidden(WarmcastError):
    """A token that is not valid for reads."""


def check_token(ctx: ApiContext, meta: dict[str, str]) -> None:
    """With ``api_read_token`` set, the scaler answers only a ScaledObject that brings it (or the write
    token) as ``token`` in its metadata, which KEDA fills from a TriggerAuthentication's secret (issue 31:
    the gRPC port served everyone while the HTTP routes asked for the token)."""
    from api.deps import _matches

    want = ctx.settings.api_read_token
    if not want:
        return
    token = meta.get("token")
    if not token:
        raise Unauthenticated("scalerMetadata.token is missing: this API requires its read token "
                              "(a TriggerAuthentication with secretTargetRef parameter: token)")
    if not _matches(token, want, ctx.settings.api_token):
        raise Forbidden("scalerMetadata.token is not valid for reads")


class Query:
    """What one ScaledObject asks for, parsed and checked from its metadata."""

    def __init__(self, ctx: ApiContext, ref: pb.ScaledObjectRef) -> None:
        meta = dict(ref.scalerMetadata)
        check_token(ctx, meta)
        check_keys(meta)
        name = meta.get("deployment") or ref.name
        self.dep = ctx.configured(name)
        if self.dep is None:
            raise NotFoundError(f"unknown deployment {name!r}")
        self.metric = meta.get("metric", "desiredReplicas")
        if self.metric not in METRICS:
            raise InputError(f"scalerMetadata.metric: {self.metric!r} is not one of {list(METRICS)}")
        self.quantile = _float(meta, "quantile", 0.9, 0.01, 0.99)
        # no lead given: the workers' planner's lead, resolved as it resolves it (service.plan_lead)
        self.lead = int(_float(meta, "lead", 0.0, 0, 29)) if meta.get("lead") not in (None, "") else None
        self.utilisation = _float(meta, "utilisation", 1.0, 0.01, 1.0)
        # at least 1 s: at 0.05 s one ScaledObject kept a core busy (issue 31); KEDA polls every 30 s by default
        self.interval = _float(meta, "streamIntervalSeconds", 15.0, 1.0, 3600)

    def values(self, ctx: ApiContext) -> dict[str, Any]:
        return service.autoscaler_values(ctx, self.dep, self.quantile, self.lead, self.utilisation)

    def value(self, ctx: ApiContext) -> float:
        return float(self.values(ctx)[self.metric])

    def target(self, ctx: ApiContext) -> float:
        if self.metric == "desiredReplicas":
            return 1.0
        # the capacity of the profile active now, by the core's plan (night or day), not the default's
        return service.demand_target(ctx, self.dep, self.quantile, self.lead, self.utilisation)

    def metric_name(self) -> str:
        return f"warmcast-{self.dep.name}-{self.metric}"


class WarmcastScaler(pb_grpc.ExternalScalerServicer):
    """The four RPCs on grpc.aio: an open StreamIsActive is a coroutine asleep between checks,
    not a thread, so any number of streams leave the unary calls their threads (finding 6).
    Values (Redis reads, maybe a forecast) are computed in ``pool``. KEDA's optional
    StreamMetricSpec is answered UNIMPLEMENTED: KEDA then falls back to GetMetricSpec."""

    def __init__(self, ctx: ApiContext, pool: ThreadPoolExecutor) -> None:
        self.ctx = ctx
        self.pool = pool

    async def _query(self, ref: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> Query:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, Query, self.ctx, ref)
        except NotFoundError as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        except InputError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except Unauthenticated as err:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(err))
        except Forbidden as err:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(err))

    async def _value(self, q: Query, context: grpc.aio.ServicerContext) -> float:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, q.value, self.ctx)
        except (NotFoundError, StalePlan) as err:  # no forecast yet, or a stopped loop's: KEDA applies its fallback
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        except Exception as err:  # noqa: BLE001 - Redis down, deadline passed and the like: KEDA retries
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(err).__name__}: {err}")

    async def IsActive(self, request, context):
        q = await self._query(request, context)
        return pb.IsActiveResponse(result=await self._value(q, context) > 0)

    async def StreamIsActive(self, request, context) -> AsyncIterator[pb.IsActiveResponse]:
        """Send the current state at once, then again whenever it changes (until KEDA cancels
        the stream or the server stops, both of which cancel this coroutine)."""
        q = await self._query(request, context)
        last = None
        while True:
            active = await self._value(q, context) > 0
            if active != last:
                yield pb.IsActiveResponse(result=active)
                last = active
            await asyncio.sleep(q.interval)

    async def GetMetricSpec(self, request, context):
        q = await self._query(request, context)
        try:
            t = await asyncio.get_running_loop().run_in_executor(self.pool, q.target, self.ctx)
        except Exception as err:  # noqa: BLE001 - Redis down and the like: KEDA retries
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(err).__name__}: {err}")
        return pb.GetMetricSpecResponse(metricSpecs=[
            pb.MetricSpec(metricName=q.metric_name(), targetSize=max(1, int(round(t))), targetSizeFloat=t)])

    async def GetMetrics(self, request, context):
        q = await self._query(request.scaledObjectRef, context)
        v = await self._value(q, context)
        name = request.metricName or q.metric_name()
        return pb.GetMetricsResponse(metricValues=[
            pb.MetricValue(metricName=name, metricValue=int(round(v)), metricValueFloat=v)])

    async def StreamMetricSpec(self, request, context):
        # Optional in KEDA's interface; pushing spec changes would add nothing, as the target
        # (1 per replica, or capacity x utilisation) only changes with the deployment's configuration.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "StreamMetricSpec: use GetMetricSpec")


class ScalerServer:
    """A running scaler: the port it bound, and ``stop``. Kept in ``RUNNING`` until stopped,
    so the server lives as long as the process whether or not the caller keeps it (finding 2)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, server: grpc.aio.Server, port: int,
                 stopped: asyncio.Event) -> None:
        self.loop, self.server, self.port, self.stopped = loop, server, port, stopped

    def stop(self, grace: float = 2.0) -> None:
        """Stop taking calls, give open ones ``grace`` seconds, then cancel them."""
        if self in RUNNING:
            RUNNING.remove(self)
            asyncio.run_coroutine_threadsafe(self._shutdown(grace), self.loop).result(timeout=grace + 10)

    async def _shutdown(self, grace: float) -> None:
        await self.server.stop(grace)
        self.stopped.set()  # only now may the server's thread end its loop


RUNNING: list[ScalerServer] = []


def serve(ctx: ApiContext, address: str = "0.0.0.0:9090", workers: int = 8) -> ScalerServer:
    """Start the scaler on ``address`` in its own thread and event loop; ``workers`` threads compute values."""
    ready: Future = Future()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="keda-value")

    async def run() -> None:
        server = grpc.aio.server()
        pb_grpc.add_ExternalScalerServicer_to_server(WarmcastScaler(ctx, pool), server)
        port = server.add_insecure_port(address)
        await server.start()
        stopped = asyncio.Event()
        ready.set_result((asyncio.get_running_loop(), server, port, stopped))
        await stopped.wait()

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as err:  # noqa: BLE001 - a bind failure is the caller's to report
            if not ready.done():
                ready.set_exception(err)

    threading.Thread(target=main, daemon=True, name="keda-grpc").start()
    handle = ScalerServer(*ready.result(timeout=60))
    RUNNING.append(handle)
    return handle
