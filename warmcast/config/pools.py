"""Deployment keys for GPU planning (``gpu:``) and hot/cold pools (``pools:``).

Kept apart from :mod:`warmcast.config.deployments`, which only holds one field for each and
calls :func:`check_against` so pool profiles are checked against the deployment's.
See ``examples/deployments.yaml`` (deployment ``chat-pools``) for a commented example.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from warmcast.config.strict import MAX_GPUS, MAX_INSTANCES, MAX_QUEUE, MAX_TOKENS, Strict

_WORKLOAD = r"^(deployment|statefulset)/.+"


class GpuSpec(Strict):
    """What the model needs and which GPU types may serve it."""

    types: list[str] = Field(default_factory=list, description="allowed GPU types (default: the whole catalogue)")
    model_memory_gb: float = Field(gt=0, description="memory one instance needs at <= 8k tokens of context")
    context_tokens: int = Field(8192, ge=1, le=MAX_TOKENS, description="needed context (a profile's max-model-len overrides)")
    gpus_per_instance: int = Field(1, ge=1, le=64)
    reference: str = Field("A100-80G", description="GPU type the profiles' capacity_rpm was measured on")
    capacity_rpm: dict[str, float] = Field(default_factory=dict, description="declared requests/min per type, for default_profile")
    max_instances: dict[str, Annotated[int, Field(le=MAX_INSTANCES)]] = Field(default_factory=dict, description="availability per type")
    max_gpus: int | None = Field(None, ge=1, le=MAX_GPUS)
    catalogue: str | None = Field(None, description="YAML file adding or overriding GPU types")

    @model_validator(mode="after")
    def _positive(self) -> "GpuSpec":
        bad = [k for k, v in {**self.capacity_rpm, **self.max_instances}.items() if not v > 0]
        if bad:
            raise ValueError(f"capacity_rpm and max_instances must be > 0; not for {bad}")
        if self.max_gpus is not None and self.max_gpus < self.gpus_per_instance:
            raise ValueError(f"max_gpus {self.max_gpus} < gpus_per_instance {self.gpus_per_instance}: "
                             "not one instance fits; raise max_gpus or lower gpus_per_instance")
        return self


class PoolSLO(Strict):
    late_wait_s: float | None = Field(None, gt=0, le=3600, description="hot: a request waiting longer is late")
    late_share: float | None = Field(None, ge=0, le=1, description="hot: allowed share of late requests")
    deadline_min: float | None = Field(None, gt=0, le=7 * 1440, description="cold: done within this many minutes")


class PoolSpec(Strict):
    profiles: list[str] = Field(min_length=1)
    slo: PoolSLO
    target_utilisation: float = Field(0.7, ge=0.05, le=1)
    max_batch: int | None = Field(None, ge=1, le=MAX_QUEUE)
    queue: int | None = Field(None, ge=1, le=MAX_QUEUE, description="bounded queue length (cold)")
    gpu_request: float = Field(1.0, gt=0, le=64, description="GPUs one instance requests (0.8: a shared GPU)")
    priority_class: str | None = None
    scaler_resource: str | None = Field(None, pattern=_WORKLOAD, description="deployment/NAME scaled for this pool")
    max_instances: int | None = Field(None, ge=1, le=MAX_INSTANCES)


class SharedLimits(Strict):
    physical_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs the pools share")
    memory_share: float = Field(0.8, gt=0, le=1, description="all pools together use at most this share of memory")
    hot_cold_ratio: float = Field(3.0, gt=0, description="hot may take at most r/(1+r) of the compute budget")


class AttributionRule(Strict):
    pool: str
    min_prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    api_keys: list[str] = Field(default_factory=list)


class Attribution(Strict):
    """Which pool a request belongs to: a log field first, then the rules in order, then the default."""

    field: str | None = Field(None, description="log column holding the pool name")
    api_key_field: str = "api_key"
    rules: list[AttributionRule] = Field(default_factory=list)
    default: str = "hot"


class PoolsSpec(Strict):
    hot: PoolSpec
    cold: PoolSpec
    limits: SharedLimits
    attribution: Attribution = Field(default_factory=Attribution)

    @model_validator(mode="after")
    def _slos(self) -> "PoolsSpec":
        if self.hot.slo.late_wait_s is None or self.hot.slo.late_share is None:
            raise ValueError("pools.hot.slo needs late_wait_s and late_share (a latency SLO)")
        if self.cold.slo.deadline_min is None:
            raise ValueError("pools.cold.slo needs deadline_min (e.g. 30: done within 30 min)")
        names = {"hot", "cold"}
        used = {r.pool for r in self.attribution.rules} | {self.attribution.default}
        if used - names:
            raise ValueError(f"pools.attribution names unknown pool(s) {sorted(used - names)}; use hot or cold")
        return self

    @model_validator(mode="after")
    def _one_instance_fits(self) -> "PoolsSpec":
        # The planner gives hot at most r/(1+r) of the GPUs and cold what is left: a pool whose
        # single instance asks for more than that can never run, whatever the demand.
        lim = self.limits
        hot_cap = lim.physical_gpus * lim.hot_cold_ratio / (1.0 + lim.hot_cold_ratio)
        if self.hot.gpu_request > hot_cap + 1e-9:
            raise ValueError(f"pools.hot.gpu_request {self.hot.gpu_request:g} > the hot share of limits.physical_gpus "
                             f"({lim.physical_gpus} x {lim.hot_cold_ratio:g}/(1+{lim.hot_cold_ratio:g}) = "
                             f"{hot_cap:g}): hot can never run an instance; raise physical_gpus or hot_cold_ratio, "
                             "or lower gpu_request")
        if self.cold.gpu_request > lim.physical_gpus:
            raise ValueError(f"pools.cold.gpu_request {self.cold.gpu_request:g} > limits.physical_gpus "
                             f"{lim.physical_gpus}: cold can never run an instance")
        return self


def check_against(pools: PoolsSpec | None, gpu: GpuSpec | None, profiles: dict[str, Any]) -> None:
    """Cross-checks with the rest of the deployment (raised as ValueError inside its validator)."""
    if pools is not None:
        for name in ("hot", "cold"):
            missing = [p for p in getattr(pools, name).profiles if p not in profiles]
            if missing:
                raise ValueError(f"pools.{name}.profiles {missing} are not among profiles {sorted(profiles)}")
    if gpu is not None:
        for key in ("capacity_rpm", "max_instances"):
            bad = [t for t in getattr(gpu, key) if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", t)]
            if bad:
                raise ValueError(f"gpu.{key}: bad GPU type name(s) {bad}")


def pool_series_name(deployment: str, pool: Literal["hot", "cold"]) -> str:
    """The load store keeps a pool's series under this deployment name (e.g. ``chat.hot``)."""
    return f"{deployment}.{pool}"
