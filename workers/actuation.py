"""Adapters from the loop to the instances of one deployment: scaler, signals, warmup.

Three kinds of fleet:

- **simulated** (``WARMCAST_WORKERS_SIMULATE`` / ``warmcast run --simulate``): :class:`SimFleet`.
- **live**: signals scraped from each instance's ``/metrics`` with the vLLM
  client (:mod:`warmup.actuators.vllm_client`), warmups sent with it, and the
  deployment's scaler backend (local processes, Kubernetes, webhook, dry-run)
  from :mod:`warmup.actuators` when it provides one.
- **dry-run** scaler (:class:`RedisDryRunScaler`): the target is only recorded, in Redis
  (forecast-only deployments).

Every scaler is wrapped in :class:`RecordingScaler`, which makes actions
targets (``scale_to(n)`` when ``n`` is already current does nothing) and
appends each real change to ``<prefix>:actions:<deployment>``: the log the
crash tests count to prove no action ran twice.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import redis

from warmcast.config.deployments import Deployment
from warmcast.text import clip
from workers.locks import lease
from workers.simfleet import SimFleet

log = logging.getLogger("warmcast.workers.actuation")
# Renewed while a call works (starting a vLLM server takes minutes); a dead worker's lapses after this.
SCALER_LEASE_S = 15.0


class RedisDryRunScaler:
    """Records the target only, in Redis: a deployment scaled by nobody (forecast-only).

    The live twin of :class:`warmup.actuators.scalers.DryRunScaler` (which keeps its target in
    memory): every worker reads the same target here.  It does not subclass that package's
    ``Scaler`` base on purpose: the base turns a backend error into a result, and here a Redis
    error must reach the task, which retries it as transient.
    """

    def __init__(self, client: redis.Redis, prefix: str, deployment: str, initial: int) -> None:
        self.r, self.key, self.initial = client, f"{prefix}:dryrun-replicas:{deployment}", initial

    def current(self) -> int:
        v = self.r.get(self.key)
        return self.initial if v is None else int(v)

    def scale_to(self, n: int, reason: str) -> None:
        self.r.set(self.key, int(n))


@dataclass
class ScaleOutcome:
    before: int
    after: int
    changed: bool
    detail: str = ""


class RecordingScaler:
    """Idempotent targets on top of any backend, with a log of the changes really made."""

    def __init__(self, inner: Any, client: redis.Redis, prefix: str, deployment: str) -> None:
        self.inner = inner
        self.r = client
        self.key = f"{prefix}:actions:{deployment}"
        self.switch_key = f"{prefix}:switch-actions:{deployment}"

    def current(self) -> int:
        return int(self.inner.current())

    def scale_to(self, n: int, reason: str, tick: str = "", remove: tuple[str, ...] = ()) -> ScaleOutcome:
        before = self.current()
        if before == n:
            return ScaleOutcome(before, n, False, "already at target")
        if remove and isinstance(self.inner, SimFleet):
            self.inner.scale_to(n, reason, remove=remove)
        else:
            self.inner.scale_to(n, reason)
        after = self.current()
        self.r.xadd(self.key, {"ts": f"{time.time():.3f}", "tick": tick, "before": before, "target": n,
                               "after": after, "reason": clip(reason, 500)}, maxlen=10_000, approximate=True)
        return ScaleOutcome(before, after, True, f"{before} -> {after}")

    def acted_on(self, tick: str, recent: int = 100) -> bool:
        """Whether one of the last ``recent`` changes was made for planning tick ``tick``."""
        return any(f.get(b"tick") == tick.encode() for _, f in self.r.xrevrange(self.key, count=recent))

    def actions(self) -> list[dict[str, str]]:
        return [{k.decode(): v.decode() for k, v in f.items()} for _, f in self.r.xrange(self.key)]

    def note_switch(self, tick: str, outcome: str) -> None:
        """Log a profile switch's change to the fleet made for ``tick`` (replicas per profile go to the
        backend itself, past ``scale_to``), so a run that died before its audit is known to have acted."""
        self.r.xadd(self.switch_key, {"ts": f"{time.time():.3f}", "tick": tick, "outcome": clip(outcome, 500)},
                    maxlen=10_000, approximate=True)

    def switched_on(self, tick: str, recent: int = 100) -> str | None:
        """The outcome of the switch change made for ``tick``, if one of the last ``recent`` was."""
        for _, f in self.r.xrevrange(self.switch_key, count=recent):
            if f.get(b"tick") == tick.encode():
                return f[b"outcome"].decode()
        return None


def live_scaler(dep: Deployment, client: redis.Redis, prefix: str, state_dir=None) -> Any:
    """The deployment's scaler backend from :mod:`warmup.actuators.scalers` (issue 5).

    The dry-run kind gets a Redis-backed target here, so every worker sees the same one.
    """
    if dep.scaler.kind == "dryrun":
        return RedisDryRunScaler(client, prefix, dep.name, max(dep.min_replicas, len(dep.instances)))
    from warmup.actuators.scalers import scaler_for

    if dep.scaler.kind == "local":
        from warmup.actuators.scalers import local_scaler_factory

        return LockedFreshScaler(local_scaler_factory(dep, state_dir), client, prefix, dep.name)
    return scaler_for(dep, state_dir=state_dir)


class LockedFreshScaler:
    """A scaler built afresh for every call, under a Redis lock per deployment.

    The local-process backend keeps its servers in a JSON state file that every
    instance of it reads when built and rewrites when it changes; two of them
    (a scrape and a planning run, or two workers) interleaving would lose a
    server from the file.  Building it under one lock per deployment makes every
    read-modify-write of that file happen one at a time, and each call sees the
    servers any worker started.
    """

    def __init__(self, make: Callable[[], Any], client: redis.Redis, prefix: str, deployment: str) -> None:
        self.make = make
        self.lock = lambda: lease(client, prefix, "scaler", deployment, SCALER_LEASE_S, wait_s=60.0)

    def _call(self, method: str, *args: Any, **kw: Any) -> Any:
        with self.lock():
            return getattr(self.make(), method)(*args, **kw)

    def current(self) -> int:
        return self._call("current")

    def scale_to(self, n: int, reason: str) -> Any:
        return self._call("scale_to", n, reason)

    def urls(self) -> list[str]:
        return self._call("urls")

    def profile_of(self) -> dict[str, str]:
        return self._call("profile_of")

    def launch_times(self) -> dict[str, float | None]:
        """Each server's URL and its launch time (wall clock), for launch-to-ready."""
        with self.lock():
            return {s.url: s.started_wall for s in self.make().servers}

    def set_replicas(self, want: dict[str, int], reason: str = "", active: str | None = None) -> Any:
        return self._call("set_replicas", want, reason, active)

    def ready_by_profile(self) -> dict[str, int]:
        return self._call("ready_by_profile")

    def close(self) -> None:
        self._call("close")


def instance_urls(scaler: Any, dep: Deployment) -> list[str]:
    """Base URLs of the deployment's instances: the scaler's (if it knows them) plus static ones."""
    urls: list[str] = []
    for attr in ("urls", "instance_urls"):
        fn = getattr(scaler, attr, None)
        if fn is not None:
            got = fn() if callable(fn) else fn
            urls.extend(str(u) for u in got)
            break
    urls.extend(u for u in dep.instances if u not in urls)
    return urls


def send_live_warmup(urls: list[str], requests: int, concurrency: int, duration_s: float, token: str | None,
                     tokens=None, should_abort: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
    """Send warmup requests to each instance (concurrently); one result dict per instance."""
    from warmup.actuators.tokens import DEFAULT_TOKENS
    from warmup.actuators.vllm_client import VLLMClient, WarmupSpec, fleet_warmup

    spec = WarmupSpec(count=max(1, int(requests)), concurrency=max(1, int(concurrency)),
                      duration_s=max(1.0, float(duration_s)))

    async def warm_all():
        abort = asyncio.Event()

        async def watch():
            while should_abort is not None and not abort.is_set():
                if should_abort():
                    abort.set()
                await asyncio.sleep(1.0)

        clients = [VLLMClient(u, token=token, retries=2) for u in urls]
        watcher = asyncio.create_task(watch())
        try:
            # Booting targets are warmed as soon as they answer /health, within the warmup's duration.
            deadline = time.monotonic() + spec.duration_s
            for c in clients:
                while not await c.is_healthy(timeout_s=1.0) and time.monotonic() < deadline and not abort.is_set():
                    await asyncio.sleep(0.5)
            return await fleet_warmup(clients, spec, tokens or DEFAULT_TOKENS, abort=abort)
        finally:
            watcher.cancel()
            await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    out = []
    for r in asyncio.run(warm_all()):
        v = r.value
        out.append({"instance": r.instance, "error": r.error, "sent": getattr(v, "sent", 0),
                    "completed": getattr(v, "completed", 0), "failed": getattr(v, "failed", 0),
                    "stopped_by": getattr(v, "stopped_by", None)})
    return out
