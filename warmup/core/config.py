"""Configuration of the decision core: scaling, tiered warmup and profile switching."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import time, tzinfo
from typing import Optional

from warmup.core.inputs import first_value


@dataclass(frozen=True, slots=True)
class ScalingConfig:
    capacity_rpm: float = 300.0          # per replica at 100% utilisation (the active profile's)
    min_replicas: int = 1
    max_replicas: int = 8
    gpus_per_replica: int = 1
    gpu_budget: Optional[int] = None     # most GPUs the deployment may hold (None: no budget)
    cold_start_min: float = 15.0
    margin_min: float = 0.0              # look ahead cold_start + margin minutes
    quantile: float = 0.9                # forecast level the pre-scaler provisions for
    target_utilisation: float = 1.0      # on the forecast quantile (the quantile is the headroom)
    reactive_utilisation: float = 1.0    # on the current load: the floor never below current need
    queue_drain_s: Optional[float] = None  # backlog counts as load drained over this time (None: the lead;
    #                                         replicas launched now help only after the cold start)
    forecast_smoothing_min: int = 1      # rolling mean over this many forecast minutes (1: off)
    max_forecast_age_s: float = 600.0    # older forecasts are ignored (reactive only)
    stabilisation_s: float = 300.0       # scale-in to the max recommendation of this window
    cooldown_up_s: float = 0.0           # after any scale action, no scale-up within this time
    cooldown_down_s: float = 300.0       # after any scale action, no scale-in within this time
    max_step_up: Optional[int] = None    # most replicas added per tick (None: any)
    max_step_down: Optional[int] = None  # most replicas removed per tick (None: any)
    # warm buffer (warmup/core/buffer.py): extra ready replicas sized from the forecast's own recent errors
    buffer_level: Optional[float] = None  # level of the recent short-lead errors the buffer covers (None: off)
    buffer_window_min: int = 120         # errors of the last this many minutes count
    buffer_lead_min: int = 5             # the short lead whose errors are measured
    buffer_adapt: Optional[float] = 0.01  # step of the buffer level's adaptation to recent misses (None: fixed level)
    # asleep tier (issue 19): instances kept asleep wake in ``wake_s`` instead of a cold start
    wake_s: Optional[float] = None       # measured/recorded wake time (None: no asleep tier)
    sleep_cost_share: float = 1.0        # an asleep instance costs this share of a GPU-hour (the GPU stays held)
    buffer_asleep: bool = False          # keep the warm buffer asleep rather than ready
    # never later than the autoscaler replaced (warmup/core/hpa.py): its HPA target utilisation
    # (None: off) and scale-down window; warmcast never holds fewer replicas than it would
    reactive_guard: Optional[float] = None
    reactive_guard_window_min: int = 5

    def __post_init__(self) -> None:
        if self.capacity_rpm <= 0:
            raise ValueError("capacity_rpm must be > 0")
        if self.min_replicas < 0 or self.max_replicas < 0:
            raise ValueError("replica bounds must be >= 0")
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas > max_replicas")
        if self.gpus_per_replica < 0:
            raise ValueError("gpus_per_replica must be >= 0")
        if not (0.0 < self.quantile < 1.0):
            raise ValueError("quantile must be in (0, 1)")
        if not (0.0 < self.target_utilisation <= 1.5) or not (0.0 < self.reactive_utilisation <= 1.5):
            raise ValueError("utilisation targets must be in (0, 1.5]")
        if self.reactive_guard is not None and not (0.0 < self.reactive_guard <= 1.5):
            raise ValueError("reactive_guard (the replaced HPA's target utilisation) must be in (0, 1.5] or None")
        if self.reactive_guard_window_min < 1:
            raise ValueError("reactive_guard_window_min must be >= 1")
        for name in ("max_step_up", "max_step_down"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 or None")
        if self.forecast_smoothing_min < 1:
            raise ValueError("forecast_smoothing_min must be >= 1")
        if self.buffer_level is not None and not (0.0 < self.buffer_level <= 1.0):
            raise ValueError("buffer_level must be in (0, 1] or None")
        if self.buffer_window_min < 1 or self.buffer_lead_min < 0:
            raise ValueError("buffer_window_min must be >= 1 and buffer_lead_min >= 0")
        if self.buffer_adapt is not None and not (0.0 < self.buffer_adapt <= 0.2):
            raise ValueError("buffer_adapt (the adaptation's step) must be in (0, 0.2] or None")
        if self.wake_s is not None and self.wake_s < 0:
            raise ValueError("wake_s must be >= 0 or None")
        if not (0.0 <= self.sleep_cost_share <= 1.0):
            raise ValueError("sleep_cost_share must be in [0, 1]")
        if self.buffer_asleep and self.wake_s is None:
            raise ValueError("buffer_asleep needs wake_s (the asleep tier's wake time)")

    @property
    def lead_min(self) -> float:
        return self.cold_start_min + self.margin_min

    @property
    def drain_s(self) -> float:
        if self.queue_drain_s is not None:
            return self.queue_drain_s
        return max(60.0, self.lead_min * 60.0)


@dataclass(frozen=True, slots=True)
class WarmupTier:
    name: str
    min_queue_depth: float     # the tier applies when queue depth is above this
    requests: int              # warmup requests per instance
    concurrency: int           # of them in flight at once per instance


DEFAULT_TIERS = (
    WarmupTier("low", 5, 4, 1),
    WarmupTier("medium", 10, 8, 2),
    WarmupTier("high", 20, 16, 4),
)


@dataclass(frozen=True, slots=True)
class WarmupConfig:
    enabled: bool = True
    tiers: tuple[WarmupTier, ...] = DEFAULT_TIERS   # ascending thresholds
    max_duration_s: float = 300.0
    seconds_per_queued: float = 0.5                 # duration = min(max_duration, depth * this)
    ramp_lead_min: float = 15.0                     # predictive ramp starts this long before growth
    growth_threshold: float = 0.15                  # forecast P50 this much above current load = growth
    max_share: float = 0.2                          # warmup load <= this share of an instance's capacity
    max_concurrency: int = 4                        # per instance, whatever the tier says
    p99_stop_rise: float = 0.2                      # stop when P99 rises this much above baseline
    stop_utilisation: float = 0.9                   # stop when real traffic uses this share of ready capacity
    p99_baseline_alpha: float = 0.1                 # EWMA weight of the P99 baseline
    max_instances: int = 8                          # instances warmed at once

    def __post_init__(self) -> None:
        th = [t.min_queue_depth for t in self.tiers]
        if th != sorted(th):
            raise ValueError("warmup tiers must have ascending thresholds")
        if not (0.0 < self.max_share <= 1.0):
            raise ValueError("max_share must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class ScheduleWindow:
    profile: str
    start: time
    end: time  # may be earlier than start: the window wraps past midnight

    def contains(self, t: time) -> bool:
        if self.start == self.end:
            return True
        if self.start < self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end


@dataclass(frozen=True, slots=True)
class ContextMixRule:
    """Ask for ``profile`` when the forecast share of long-context requests is >= ``min_share``."""

    profile: str
    min_share: float


@dataclass(frozen=True, slots=True)
class SwitchConfig:
    enabled: bool = False
    default_profile: str = "day"
    profile_capacity: tuple[tuple[str, float], ...] = ()   # (name, capacity_rpm)
    # (name, "calibrated" or "declared"): where each profile's capacity comes from, for reasons
    capacity_source: tuple[tuple[str, str], ...] = ()
    trigger: str = "schedule"                                # "schedule" or "context_mix"
    windows: tuple[ScheduleWindow, ...] = ()
    tz: Optional[tzinfo] = None                              # None: UTC
    mix_rules: tuple[ContextMixRule, ...] = ()               # first match wins
    mix_signal: str = "long_context_share"
    prewarm_min: float = 30.0
    canary_share: float = 0.1
    hold_min: float = 30.0
    rollback_p99_rise: float = 0.2
    max_prewarm_wait_min: float = 30.0   # after the window starts, wait at most this for ready targets
    settle_min: float = 15.0             # the P99 breaker keeps watching this long after the move
    lead_source: str = ""                # where prewarm_min came from (the measured cold start), for reasons
    max_replicas: Optional[int] = None   # the deployment's bound: both profiles together never ask for more
    min_replicas: int = 0                # its floor: both profiles together never ask for fewer (issue 41)
    # Where traffic is routed: "replicas" (round robin over ready replicas, a Kubernetes Service) or
    # "weights" (a router that takes weights, a Gateway API HTTPRoute's backendRefs): the canary's
    # share of requests is its share of ready replicas, or its weight (issue 42).
    routing: str = "replicas"

    def __post_init__(self) -> None:
        if self.min_replicas < 0 or (self.max_replicas is not None and self.min_replicas > self.max_replicas):
            raise ValueError("switch min_replicas must be in [0, max_replicas]")
        if self.trigger not in ("schedule", "context_mix"):
            raise ValueError("trigger must be 'schedule' or 'context_mix'")
        if not (0.0 < self.canary_share <= 1.0):
            raise ValueError("canary_share must be in (0, 1]")
        if self.routing not in ("replicas", "weights"):
            raise ValueError("routing must be 'replicas' or 'weights'")

    def source_of(self, profile: str) -> str:
        """'calibrated' (a measured capacity, issue 15) or 'declared' (the deployments file's)."""
        return next((src for name, src in self.capacity_source if name == profile), "declared")

    def capacity_of(self, profile: str, fallback: float) -> float:
        return first_value(self.profile_capacity, profile, fallback)


@dataclass(frozen=True, slots=True)
class CoreConfig:
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    dry_run: bool = False   # forecast-only mode: decide and record, apply nothing
