"""Chaos faults on the API process (bench/chaos.py): more open gRPC streams than the scaler has
threads (finding 6), a burst of forecast requests for a deployment with no stored forecast
(finding 11), and SIGTERM while a request waits on such a cold computation (finding 3).

Each does from outside the process what tests/api does inside it (test_keda_grpc.py's
finding6 test, test_reliability.py's finding11 and finding3 SIGTERM tests), against the rig's
served `warmcast api serve --grpc-port`.  The two cold deployments are not in the rig's
deployments file, so no worker stores a forecast for them: every answer is computed by the API.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import signal
import subprocess
import threading
import time

import httpx
import numpy as np
import pandas as pd

from bench.chaosrig import Rig, Row

COLD_BURST = "chaos-cold-burst"
COLD_TERM = "chaos-cold-term"
BURST_REQUESTS, BURST_CLIENTS = 1000, 50  # the issue measured 2,000 at 50; half keeps the run short


def seed_load(rig: Rig, dep: str, minutes: int) -> None:
    """``minutes`` of load ending at the current minute (a daily sine with Poisson noise), no forecast."""
    end = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("min")
    idx = pd.date_range(end=end - pd.Timedelta(minutes=1), periods=minutes, freq="min")
    m = (idx.hour * 60 + idx.minute).to_numpy()
    base = 300 + 200 * np.sin(2 * np.pi * (m - 360) / 1440)
    y = np.random.default_rng(0).poisson(np.maximum(base, 5)).astype(float)
    rig.ctx.store.upsert_frame(dep, pd.DataFrame({"requests": y}, index=pd.DatetimeIndex(idx, name="time")))


def _scaler_threads() -> int:
    """The value threads `api serve --grpc-port` gives the scaler (serve's default)."""
    from api.keda.scaler import serve

    return int(inspect.signature(serve).parameters["workers"].default)


def _streams_then_unary(rig: Rig, n_streams: int) -> tuple[int, str, float]:
    """Open ``n_streams`` StreamIsActive streams and keep them open while one IsActive is asked:
    (streams that gave their first answer, IsActive's answer or error, seconds IsActive took)."""
    import grpc

    from api.keda.vendor import externalscaler_pb2 as pb
    from api.keda.vendor import externalscaler_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"127.0.0.1:{rig.grpc_port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name=rig.dep, scalerMetadata={"streamIntervalSeconds": "1"})
        streams = [stub.StreamIsActive(ref, timeout=60) for _ in range(n_streams)]
        try:
            opened = sum(1 for s in streams if next(s).result in (True, False))
            t0 = time.monotonic()
            try:
                answer = str(stub.IsActive(ref, timeout=10).result)
            except grpc.RpcError as err:
                answer = f"error {err.code().name}"
            return opened, answer, time.monotonic() - t0
        except grpc.RpcError as err:
            return 0, f"a stream failed: {err.code().name}", 0.0
        finally:
            for s in streams:
                s.cancel()


def fault_grpc_streams(rig: Rig) -> Row:
    threads = _scaler_threads()
    n = threads + 4
    opened, answer, seconds = _streams_then_unary(rig, n)
    ok = opened == n and not answer.startswith("error") and not answer.startswith("a stream")
    return Row(f"gRPC: {n} open StreamIsActive streams ({threads} scaler threads), then IsActive", ok, None,
               "0", "-", f"{opened}/{n} streams answered; IsActive while they stay open -> {answer} in {seconds:.2f} s")


async def _burst(url: str, n: int, clients: int) -> list[tuple[int, bytes, float]]:
    """``n`` GETs of ``url`` from ``clients`` concurrent connections: (status, body, seconds) each."""
    out: list[tuple[int, bytes, float]] = []
    todo = iter(range(n))

    async def client(web: httpx.AsyncClient) -> None:
        for _ in todo:  # the clients share one iterator: n requests in all
            t0 = time.monotonic()
            try:
                r = await web.get(url)
                out.append((r.status_code, r.content, time.monotonic() - t0))
            except httpx.HTTPError:
                out.append((599, b"", time.monotonic() - t0))

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as web:
        await asyncio.gather(*(client(web) for _ in range(clients)))
    return out


def fault_cold_burst(rig: Rig) -> Row:
    seed_load(rig, COLD_BURST, minutes=1440)
    url = f"http://127.0.0.1:{rig.api_port}/v1/deployments/{COLD_BURST}/forecast?horizon=30"
    t0 = time.monotonic()
    replies = asyncio.run(_burst(url, BURST_REQUESTS, BURST_CLIENTS))
    seconds = time.monotonic() - t0
    codes: dict[int, int] = {}
    for status, _, _ in replies:
        codes[status] = codes.get(status, 0) + 1
    bodies = {body for status, body, _ in replies if status == 200}
    p99 = float(np.percentile([s for _, _, s in replies], 99))
    computed = all(json.loads(b).get("source") == "computed" for b in bodies)
    ok = codes == {200: BURST_REQUESTS} and computed
    return Row(f"API: {BURST_REQUESTS} forecast requests, {BURST_CLIENTS} concurrent, no stored forecast", ok,
               None, "0", "-",
               f"{seconds:.1f} s for the burst; status counts {codes}; {len(bodies)} distinct answer(s) (each computation has its own "
               f"created_at), source computed: {computed}; {len(replies) / seconds:.0f} req/s, p99 {p99:.2f} s",
               n5xx=str(sum(n for c, n in codes.items() if c >= 500)))


def fault_api_sigterm_cold(rig: Rig) -> Row:
    """SIGTERM to the API (its process, as Kubernetes sends it) while a request waits on a cold
    forecast computation; then the API is started again for the rows after this one."""
    seed_load(rig, COLD_TERM, minutes=7 * 1440)  # the API reads history_days (7): a full fit, seconds at least
    waiting = threading.Thread(target=rig.api_get, args=(f"/v1/deployments/{COLD_TERM}/forecast", 600),
                               daemon=True)
    waiting.start()
    time.sleep(0.1)  # the request is in, waiting on the computation (a fit of a week: under half a second)
    in_flight = waiting.is_alive()
    api = rig.procs["api"]
    api.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    try:
        api.wait(timeout=30)
        stop_s: float | None = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        stop_s = None
        rig.kill("api")
    rig.killed.add("api")
    t1 = time.monotonic()
    back = rig.start_api()
    back_s = time.monotonic() - t1
    ok = in_flight and stop_s is not None and stop_s < 8 and back
    stopped = f"exited {stop_s:.1f} s after SIGTERM" if stop_s is not None else "still running 30 s after SIGTERM"
    return Row("API: SIGTERM while a request waits on a cold forecast", ok, None, "0", "-",
               f"request open at SIGTERM: {'yes' if in_flight else 'no (the computation ended first)'}; {stopped}; "
               f"started again: /healthz {'ok' if back else 'no answer'} after {back_s:.1f} s")


FAULTS = (fault_grpc_streams, fault_cold_burst, fault_api_sigterm_cold)
