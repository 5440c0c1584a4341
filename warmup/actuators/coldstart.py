"""Measure a deployment's cold start on a launching backend and store it for the planner.

One measurement:

1. ``scale_to(1)`` on a backend that launches processes (the local one) and
   time until ``/health`` answers: **time to healthy**.
2. One probe completion right away: **first request, cold**.
3. A warmup (requests shaped like the deployment's traffic), then the same
   probe ``repeats`` times: **first request after warmup** (median).
4. Where the instance supports sleep mode (GPU, ``--enable-sleep-mode``, dev
   mode): ``/sleep?level=1``, ``/wake_up`` and a probe after waking, timed.
   Elsewhere the reason it was not measured goes into ``notes``.
5. ``scale_to(0)``.

The planner's figure is ``cold_start_min = (time_to_healthy + warmup) / 60``:
minutes from launch until the instance is warm.  It is stored as JSON under
``{prefix}:coldstart:{deployment}``; :func:`load_coldstart` reads it back.
:func:`resolve_lead` reads it with the measured launch-to-ready times and picks the lead.
"""
from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np

from warmcast.errors import WarmcastError
from warmup.actuators.tokens import DEFAULT_TOKENS, TokenDistribution
from warmup.actuators.vllm_client import VLLMClient, WarmupSpec
from warmup.core.lead import RECENT, Lead, choose


class LaunchingBackend(Protocol):
    """A scaler that starts instances here and can wait for them (LocalProcessScaler)."""

    backend: str

    def scale_to(self, n: int, reason: str, forecast: Any = None) -> Any: ...

    async def wait_ready(self, timeout_s: float = 240.0) -> dict[str, float]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ColdStartResult:
    deployment: str
    backend: str
    model: str
    engine_args: dict[str, Any]
    time_to_healthy_s: float
    first_request_cold_s: float
    first_request_warm_s: float
    warmup_s: float
    warmup_requests: int
    probe_prompt_tokens: int
    probe_output_tokens: int
    measured_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    host: str = field(default_factory=lambda: f"{platform.node()} {platform.machine()}")
    notes: list[str] = field(default_factory=list)
    sleep_s: float | None = None  # None: sleep mode unavailable (see notes)
    wake_s: float | None = None
    first_request_after_wake_s: float | None = None

    @property
    def cold_start_min(self) -> float:
        return (self.time_to_healthy_s + self.warmup_s) / 60.0

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "cold_start_min": self.cold_start_min}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "ColdStartResult":
        data = json.loads(text)
        data.pop("cold_start_min", None)
        return cls(**data)

    def summary(self) -> str:
        return "\n".join([
            f"cold start of {self.deployment} ({self.backend} backend, {self.host}, {self.measured_at})",
            f"  time to healthy:              {self.time_to_healthy_s:8.2f} s",
            f"  first request, cold:          {self.first_request_cold_s * 1000:8.1f} ms",
            f"  warmup ({self.warmup_requests} requests):        {self.warmup_s:8.2f} s",
            f"  first request after warmup:   {self.first_request_warm_s * 1000:8.1f} ms (median)",
            f"  probe: {self.probe_prompt_tokens} prompt tokens -> {self.probe_output_tokens} generated",
            f"  cold_start_min (healthy + warmup): {self.cold_start_min:.3f}",
            (f"  sleep level 1: {self.sleep_s:.2f} s, wake_up: {self.wake_s:.2f} s, first request after wake: "
             f"{(self.first_request_after_wake_s or 0) * 1000:.1f} ms" if self.wake_s is not None
             else "  sleep/wake: not measured (" + next((n.removeprefix("sleep/wake not measured: ")
                                                          for n in self.notes if "sleep" in n), "unavailable") + ")"),
        ])


def coldstart_key(prefix: str, deployment: str) -> str:
    return f"{prefix}:coldstart:{deployment}"


def store_coldstart(redis: Any, prefix: str, result: ColdStartResult) -> str:
    key = coldstart_key(prefix, result.deployment)
    redis.set(key, result.to_json())
    return key


def load_coldstart(redis: Any, prefix: str, deployment: str) -> ColdStartResult | None:
    """The last stored cold-start measurement of ``deployment``, or None."""
    raw = redis.get(coldstart_key(prefix, deployment))
    if raw is None:
        return None
    try:
        return ColdStartResult.from_json(raw)
    except (ValueError, TypeError) as err:
        raise WarmcastError(f"stored cold-start figure of {deployment} is unreadable: {err}") from None


def launch_ready_key(prefix: str, deployment: str) -> str:
    """The list of a deployment's recent launch-to-ready seconds, newest first (``workers.lead.record``)."""
    return f"{prefix}:launch-ready:{deployment}"


def resolve_lead(redis: Any, prefix: str, deployment: Any) -> Lead:
    """The lead every planner uses for ``deployment`` (a :class:`warmcast.config.deployments.Deployment`):
    the stored launch-to-ready times and record, chosen by the core's one rule
    (:func:`warmup.core.lead.choose`), so the worker, the API and the what-if agree."""
    recent = [float(v) for v in redis.lrange(launch_ready_key(prefix, deployment.name), 0, RECENT - 1)]
    record = load_coldstart(redis, prefix, deployment.name)
    return choose(recent, None if record is None else record.cold_start_min, deployment.cold_start_min)


async def measure_coldstart(
    backend: LaunchingBackend,
    deployment: str,
    *,
    model: str = "",
    engine_args: dict[str, Any] | None = None,
    tokens: TokenDistribution = DEFAULT_TOKENS,
    warmup: WarmupSpec = WarmupSpec(count=8, concurrency=2, duration_s=120),
    probe: tuple[int, int] = (128, 16),
    repeats: int = 3,
    healthy_timeout_s: float = 300.0,
    notes: list[str] | None = None,
) -> ColdStartResult:
    """Launch one instance through ``backend``, measure it, stop it (also on failure)."""
    try:
        backend.scale_to(1, f"measure cold start of {deployment}")
        ready = await backend.wait_ready(healthy_timeout_s)
        (url, healthy_s), = ready.items()
        async with VLLMClient(url, name=f"{deployment}@{url}", timeout_s=120) as c:
            prompt, out = probe
            info = await c.model_info()
            if info.max_model_len:
                prompt = min(prompt, info.max_model_len - out - 1)
            rng_seed = 7
            cold = await c.complete(prompt, out, rng=np.random.default_rng(rng_seed))
            t0 = time.perf_counter()
            warm_res = await c.warmup(warmup, tokens, seed=11)
            warmup_s = time.perf_counter() - t0
            if warm_res.failed:
                raise WarmcastError(f"warmup of {deployment} failed: {warm_res.errors[:2]}")
            warm = []
            for i in range(max(1, repeats)):
                # A fresh prompt each time: a prefix-cache hit would flatter the figure.
                warm.append((await c.complete(prompt, out, rng=np.random.default_rng(rng_seed + 1 + i))).latency_s)
            notes = list(notes or [])
            sleep_s = wake_s = after_wake = None
            support = await c.sleep_support()
            if support.available:
                sleep_s = await c.sleep(1, check=False)
                wake_s = await c.wake_up(check=False)
                after_wake = (await c.complete(prompt, out, rng=np.random.default_rng(rng_seed + 99))).latency_s
            else:
                notes.append(f"sleep/wake not measured: {support.reason}")
        return ColdStartResult(
            deployment=deployment, backend=backend.backend, model=model, engine_args=dict(engine_args or {}),
            time_to_healthy_s=healthy_s, first_request_cold_s=cold.latency_s,
            first_request_warm_s=statistics.median(warm), warmup_s=warmup_s,
            warmup_requests=warm_res.completed, probe_prompt_tokens=prompt, probe_output_tokens=out,
            notes=notes, sleep_s=sleep_s, wake_s=wake_s, first_request_after_wake_s=after_wake,
        )
    finally:
        backend.scale_to(0, f"cold-start measurement of {deployment} done")
        backend.close()
