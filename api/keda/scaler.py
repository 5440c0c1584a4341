"""KEDA external scaler service: the same numbers as ``/v1/keda/{deployment}``, over gRPC.

Trigger metadata (``scalerMetadata`` in the ScaledObject):

- ``deployment``: warmcast deployment name (default: the ScaledObject's name)
- ``metric``: ``desiredReplicas`` (default; target 1 per replica, so KEDA sets that
  many replicas) or ``forecastDemandRpm`` (target = capacity per replica x utilisation)
- ``quantile`` (default 0.9), ``lead`` minutes (default: the deployment's cold start),
  ``utilisation`` (default 1.0)
- ``streamIntervalSeconds`` for StreamIsActive (default 15)

IsActive is true when the number asked for is above zero (scale from/to zero).
"""
from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, Iterator

import grpc

from api import service
from api.deps import ApiContext
from api.keda import externalscaler_pb2 as pb
from api.keda import externalscaler_pb2_grpc as pb_grpc
from warmcast.errors import InputError, NotFoundError

METRICS = ("desiredReplicas", "forecastDemandRpm")


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


class Query:
    """What one ScaledObject asks for, parsed and checked from its metadata."""

    def __init__(self, ctx: ApiContext, ref: pb.ScaledObjectRef) -> None:
        meta = dict(ref.scalerMetadata)
        name = meta.get("deployment") or ref.name
        self.dep = ctx.configured(name)
        if self.dep is None:
            raise NotFoundError(f"unknown deployment {name!r}")
        self.metric = meta.get("metric", "desiredReplicas")
        if self.metric not in METRICS:
            raise InputError(f"scalerMetadata.metric: {self.metric!r} is not one of {list(METRICS)}")
        self.quantile = _float(meta, "quantile", 0.9, 0.01, 0.99)
        lead = _float(meta, "lead", min(29.0, float(round(self.dep.cold_start_min))), 0, 29)
        self.lead = int(lead)
        self.utilisation = _float(meta, "utilisation", 1.0, 0.01, 1.0)
        self.interval = _float(meta, "streamIntervalSeconds", 15.0, 0.05, 3600)

    def values(self, ctx: ApiContext) -> dict[str, Any]:
        return service.autoscaler_values(ctx, self.dep, self.quantile, self.lead, self.utilisation)

    def value(self, ctx: ApiContext) -> float:
        return float(self.values(ctx)[self.metric])

    def target(self) -> float:
        if self.metric == "desiredReplicas":
            return 1.0
        return service._capacity(self.dep) * self.utilisation

    def metric_name(self) -> str:
        return f"warmcast-{self.dep.name}-{self.metric}"


class WarmcastScaler(pb_grpc.ExternalScalerServicer):
    def __init__(self, ctx: ApiContext, stop: threading.Event | None = None) -> None:
        self.ctx = ctx
        self.stop = stop or threading.Event()

    def _query(self, ref, context) -> Query:
        try:
            return Query(self.ctx, ref)
        except NotFoundError as err:
            context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        except InputError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    def _value(self, q: Query, context) -> float:
        try:
            return q.value(self.ctx)
        except NotFoundError as err:  # e.g. no load and no forecast yet
            context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        except Exception as err:  # noqa: BLE001 - Redis down and the like: KEDA retries
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(err).__name__}: {err}")

    def IsActive(self, request, context):
        q = self._query(request, context)
        return pb.IsActiveResponse(result=self._value(q, context) > 0)

    def StreamIsActive(self, request, context) -> Iterator[pb.IsActiveResponse]:
        """Send the current state at once, then again whenever it changes."""
        q = self._query(request, context)
        last = None
        while context.is_active() and not self.stop.is_set():
            active = self._value(q, context) > 0
            if active != last:
                yield pb.IsActiveResponse(result=active)
                last = active
            self.stop.wait(q.interval)

    def GetMetricSpec(self, request, context):
        q = self._query(request, context)
        t = q.target()
        return pb.GetMetricSpecResponse(metricSpecs=[
            pb.MetricSpec(metricName=q.metric_name(), targetSize=max(1, int(round(t))), targetSizeFloat=t)])

    def GetMetrics(self, request, context):
        q = self._query(request.scaledObjectRef, context)
        v = self._value(q, context)
        name = request.metricName or q.metric_name()
        return pb.GetMetricsResponse(metricValues=[
            pb.MetricValue(metricName=name, metricValue=int(round(v)), metricValueFloat=v)])


def serve(ctx: ApiContext, address: str = "0.0.0.0:9090", workers: int = 8) -> tuple[grpc.Server, int, threading.Event]:
    """Start the scaler on ``address``; returns (server, bound port, stop event for open streams)."""
    stop = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    pb_grpc.add_ExternalScalerServicer_to_server(WarmcastScaler(ctx, stop), server)
    port = server.add_insecure_port(address)
    server.start()
    return server, port, stop
