"""Fleet helpers: one result per instance, never raising for one of them."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Collection, Generic, Sequence, TypeVar

from warmup.actuators.metrics import MetricsSnapshot, merge_histograms
from warmup.actuators.tokens import DEFAULT_TOKENS, TokenDistribution
from warmup.actuators.vllm_client.client import VLLMClient
from warmup.actuators.vllm_client.errors import InstanceError
from warmup.actuators.vllm_client.warmup_traffic import WarmupResult, WarmupSpec, WarmupSpecLike

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class InstanceResult(Generic[T]):
    instance: str
    value: T | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


async def for_each(clients: Sequence[VLLMClient], fn: Callable[[VLLMClient], Awaitable[T]]) -> list[InstanceResult[T]]:
    """Run ``fn`` on every client concurrently; an instance's failure becomes its result's error."""

    async def result_of(c: VLLMClient) -> InstanceResult[T]:
        try:
            return InstanceResult(c.name, await fn(c))
        except InstanceError as err:
            return InstanceResult(c.name, error=str(err))
        except Exception as err:  # a bug or odd answer in one instance must not stop the fleet
            log.exception("unexpected failure talking to %s", c.name)
            return InstanceResult(c.name, error=f"vLLM instance {c.name}: {type(err).__name__}: {err}")

    return list(await asyncio.gather(*(result_of(c) for c in clients)))


@dataclass(frozen=True)
class FleetSignals:
    """Signals of a whole deployment, summed over the instances that answered."""

    instances: list[InstanceResult[MetricsSnapshot]]
    waiting: float
    running: float
    kv_cache_usage_max: float | None
    answered: int

    @property
    def errors(self) -> dict[str, str]:
        return {r.instance: r.error for r in self.instances if r.error}

    def ttft_quantile(self, q: float, before: "FleetSignals | None" = None,
                      only: Collection[str] | None = None) -> float | None:
        """Over every instance that answered, or ``only`` those named (one profile's, say)."""
        return self._quantile("ttft", q, before, only)

    def e2e_quantile(self, q: float, before: "FleetSignals | None" = None) -> float | None:
        return self._quantile("e2e", q, before)

    def _quantile(self, attr: str, q: float, before: "FleetSignals | None",
                  only: Collection[str] | None = None) -> float | None:
        prev = {r.instance: r.value for r in (before.instances if before else []) if r.value}
        hs = []
        for r in self.instances:
            if r.value is None or getattr(r.value, attr) is None or (only is not None and r.instance not in only):
                continue
            p = prev.get(r.instance)
            hs.append(getattr(r.value, attr).minus(getattr(p, attr) if p else None))
        merged = merge_histograms(hs)
        return merged.quantile(q) if merged else None


async def fleet_metrics(clients: Sequence[VLLMClient]) -> FleetSignals:
    results = await for_each(clients, lambda c: c.metrics())
    snaps = [r.value for r in results if r.value is not None]
    kv = [s.kv_cache_usage for s in snaps if s.kv_cache_usage is not None]
    return FleetSignals(
        instances=results,
        waiting=sum(s.waiting for s in snaps),
        running=sum(s.running for s in snaps),
        kv_cache_usage_max=max(kv) if kv else None,
        answered=len(snaps),
    )


async def fleet_health(clients: Sequence[VLLMClient]) -> list[InstanceResult[bool]]:
    return await for_each(clients, lambda c: c.health())


async def fleet_warmup(
    clients: Sequence[VLLMClient],
    spec: WarmupSpecLike,
    tokens: TokenDistribution = DEFAULT_TOKENS,
    *,
    abort: asyncio.Event | None = None,
    seed: int | None = None,
) -> list[InstanceResult[WarmupResult]]:
    return await for_each(clients, lambda c: c.warmup(spec, tokens, abort=abort, seed=seed))


async def apply_warmup_decision(
    clients: Sequence[VLLMClient],
    decision: Any,
    tokens: TokenDistribution = DEFAULT_TOKENS,
    *,
    abort: asyncio.Event | None = None,
) -> list[InstanceResult[WarmupResult]]:
    """Run the core's ``WarmupDecision`` on the instances it names (by client name or URL).

    A decision naming no instance warms every client; an unknown name becomes an
    error result for that name.
    """
    if not getattr(decision, "requests_per_instance", 0) and getattr(decision, "count", None) is None:
        return []
    names = tuple(getattr(decision, "instances", ()) or ())
    by_key = {c.name: c for c in clients} | {c.base_url: c for c in clients}
    chosen = [by_key[n] for n in names if n in by_key] if names else list(clients)
    unknown = [InstanceResult[WarmupResult](n, error=f"vLLM instance {n}: not among the known clients")
               for n in names if n not in by_key]
    return unknown + await fleet_warmup(chosen, WarmupSpec.of(decision), tokens, abort=abort)
