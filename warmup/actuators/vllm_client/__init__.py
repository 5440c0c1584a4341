"""The vLLM side of warmcast: an async client per vLLM instance and fleet helpers.

- :mod:`.client`: :class:`VLLMClient` (health, metrics, models, completions, sleep/wake,
  prefix-cache reset, with retries); the endpoints it speaks and their pitfalls.
- :mod:`.warmup_traffic`: :class:`WarmupSpec` and the warmup requests sent to one instance.
- :mod:`.fleet`: the same over many instances, one :class:`InstanceResult` per instance
  instead of raising, and the core's ``WarmupDecision`` applied to the instances it names.
- :mod:`.errors`: errors naming the instance.
"""
from warmup.actuators.vllm_client.client import VLLMClient
from warmup.actuators.vllm_client.errors import InstanceError, InstanceUnavailable, SleepModeUnavailable
from warmup.actuators.vllm_client.fleet import (
    FleetSignals,
    InstanceResult,
    apply_warmup_decision,
    fleet_health,
    fleet_metrics,
    fleet_warmup,
    for_each,
)
from warmup.actuators.vllm_client.warmup_traffic import WarmupResult, WarmupSpec

__all__ = [
    "FleetSignals", "InstanceError", "InstanceResult", "InstanceUnavailable", "SleepModeUnavailable", "VLLMClient",
    "WarmupResult", "WarmupSpec", "apply_warmup_decision", "fleet_health", "fleet_metrics", "fleet_warmup",
    "for_each",
]
