"""GPU types and whether a model fits one: pure values, no catalogue file here.

The catalogue file is read at the edge (``warmup.planning.gpu_catalogue``); the core only sees
:class:`GpuType` values and the options built from them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

BASE_CONTEXT_TOKENS = 8192  # memory needs are declared at this context length


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_gb: float
    tflops_fp16: float
    bandwidth_gbs: float
    cost_index: float  # price of one GPU-hour relative to an A100-80G (1.0)


@dataclass(frozen=True)
class GpuOption:
    """One way to run an instance: a GPU type, how many of them, and what one instance serves."""

    gpu: GpuType
    capacity_rpm: float           # requests/min one instance serves at 100% utilisation
    capacity_source: str          # "calibration" | "declared" | "estimated: ..." (why we believe it)
    gpus_per_instance: int = 1
    max_instances: int | None = None  # availability of this type (None: unbounded)

    @property
    def cost_per_instance_hour(self) -> float:
        return self.gpu.cost_index * self.gpus_per_instance


@dataclass(frozen=True)
class Fit:
    fits: bool
    need_gb: float
    have_gb: float
    reason: str


def memory_need_gb(base_gb: float, context_tokens: int) -> float:
    """Memory a model needs at ``context_tokens``: base up to 8k, base x (1 + log2(len / 8k)) above.

    The log growth follows the issue's planning rule (KV cache dominated by the longest
    sequences that are actually resident, not by the worst case)."""
    if context_tokens <= BASE_CONTEXT_TOKENS:
        return float(base_gb)
    return float(base_gb) * (1.0 + math.log2(context_tokens / BASE_CONTEXT_TOKENS))


def check_fit(gpu: GpuType, base_gb: float, context_tokens: int, gpus_per_instance: int = 1) -> Fit:
    """Whether an instance of ``gpus_per_instance`` GPUs of this type holds the model at that context."""
    need = memory_need_gb(base_gb, context_tokens)
    have = gpu.memory_gb * gpus_per_instance
    if need <= have:
        return Fit(True, need, have, f"{need:.1f} GB needed at {context_tokens} tokens <= {have:g} GB on "
                                     f"{gpus_per_instance}x {gpu.name}")
    return Fit(False, need, have, f"does not fit: {need:.1f} GB needed at {context_tokens} tokens > {have:g} GB on "
                                  f"{gpus_per_instance}x {gpu.name}")


def estimated_capacity(reference: GpuType, reference_rpm: float, target: GpuType) -> float:
    """Capacity on ``target`` scaled from a measured ``reference`` by memory bandwidth: decoding,
    which dominates LLM serving time, is bandwidth bound. A guess, labelled as such by callers."""
    return reference_rpm * target.bandwidth_gbs / reference.bandwidth_gbs


@dataclass(frozen=True)
class Capacity:
    rpm: float
    source: str


def build_options(types: list[GpuType], capacities: dict[str, Capacity], base_gb: float, context_tokens: int,
                  gpus_per_instance: int = 1, max_instances: dict[str, int] | None = None,
                  ) -> tuple[list[GpuOption], dict[str, str]]:
    """The GPU types a model can run on, and for each one left out, why.

    A type is an option only if the model fits its memory at ``context_tokens`` and a
    capacity is known for it (calibrated, declared or estimated by the caller)."""
    options: list[GpuOption] = []
    excluded: dict[str, str] = {}
    for gpu in types:
        fit = check_fit(gpu, base_gb, context_tokens, gpus_per_instance)
        if not fit.fits:
            excluded[gpu.name] = fit.reason
        elif gpu.name not in capacities:
            excluded[gpu.name] = "no capacity known (no calibration, none declared)"
        else:
            cap = capacities[gpu.name]
            options.append(GpuOption(gpu, cap.rpm, cap.source, gpus_per_instance,
                                     (max_instances or {}).get(gpu.name)))
    return options, excluded
