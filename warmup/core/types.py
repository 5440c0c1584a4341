"""Typed inputs, configuration, state and decisions of the pure decision core.

Everything here is an immutable value: the core never reads a clock, a file or a
socket.  ``now`` arrives in :class:`TickInput`; the policy state (cooldowns, the
stabilisation history, the switch state machine, the warmup state) arrives in
:class:`PolicyState` and the updated copy leaves in :class:`TickOutput`.

Times are ``datetime`` values.  Naive datetimes are read as UTC; aware ones are
converted, so callers may mix the two.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta, timezone, tzinfo
from enum import Enum
from typing import Optional


def as_utc(t: datetime) -> datetime:
    """A tz-aware UTC copy of ``t`` (naive values are taken to be UTC already)."""
    if t.tzinfo is None:
        return t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc)


# --------------------------------------------------------------------------- reasons


class ReasonCode(str, Enum):
    """Why a decision is what it is.  Every decision carries exactly one."""

    # pre-scaling: where the number came from
    FORECAST_PRESCALE = "forecast_prescale"          # forecast over the lead window needs more
    REACTIVE_LOAD = "reactive_load"                  # current load (and queue) needs more
    QUEUE_BACKLOG = "queue_backlog"                  # the queue backlog dominates the load term
    NO_CHANGE = "no_change"                          # what we have is what is needed
    FORECAST_BLOCKS_SCALE_IN = "forecast_blocks_scale_in"  # load fell but the forecast needs them soon
    STABILISATION = "stabilisation"                  # scale-in waits for the stabilisation window
    NO_FORECAST = "no_forecast"                      # no usable forecast: reactive only
    STALE_FORECAST = "stale_forecast"                # forecast too old: reactive only
    # guardrails
    MIN_REPLICAS = "min_replicas"
    MAX_REPLICAS = "max_replicas"
    GPU_BUDGET = "gpu_budget"
    MAX_STEP = "max_step"
    COOLDOWN_UP = "cooldown_up"
    COOLDOWN_DOWN = "cooldown_down"
    # warmup
    WARMUP_QUEUE = "warmup_queue"                    # queue depth crossed a tier threshold
    WARMUP_PREDICTED_GROWTH = "warmup_predicted_growth"
    WARMUP_CONTINUE = "warmup_continue"
    WARMUP_IDLE = "warmup_idle"                      # nothing calls for warmup
    WARMUP_NO_ELIGIBLE = "warmup_no_eligible"        # no new/booting/waking/idle instance
    WARMUP_STOP_P99 = "warmup_stop_p99"
    WARMUP_STOP_TRAFFIC = "warmup_stop_traffic"      # real traffic needs the capacity
    WARMUP_DONE = "warmup_done"
    # profile switching
    SWITCH_STEADY = "switch_steady"
    SWITCH_SCHEDULE = "switch_schedule"              # a schedule window is ahead / started / ended
    SWITCH_CONTEXT_MIX = "switch_context_mix"        # forecast context-length mix asks for a profile
    SWITCH_PREWARMING = "switch_prewarming"
    SWITCH_WAIT_READY = "switch_wait_ready"          # target instances not ready yet
    SWITCH_CANARY = "switch_canary"
    SWITCH_HOLD = "switch_hold"
    SWITCH_COMPLETE = "switch_complete"
    SWITCH_CANCELLED = "switch_cancelled"
    SWITCH_ROLLBACK_P99 = "switch_rollback_p99"
    SWITCH_PAUSED = "switch_paused"
    SWITCH_RESUMED = "switch_resumed"
    SWITCH_NO_P99 = "switch_no_p99"


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    text: str

    def __str__(self) -> str:
        return f"{self.code.value}: {self.text}"


# --------------------------------------------------------------------------- inputs


class InstanceState(str, Enum):
    BOOTING = "booting"          # launched, loading weights / compiling; serves nothing
    WAKING = "waking"            # waking from sleep mode; serves nothing yet
    READY_IDLE = "ready_idle"    # serving, no real traffic right now
    READY_BUSY = "ready_busy"    # serving real traffic with room to spare
    SATURATED = "saturated"      # serving at its limit (running == max-num-seqs or queue building)

    @property
    def ready(self) -> bool:
        return self in (InstanceState.READY_IDLE, InstanceState.READY_BUSY, InstanceState.SATURATED)


@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    state: InstanceState
    profile: str = ""
    load_rpm: float = 0.0             # real requests/min it serves now
    warmed: bool = False              # has it had its warmup already?
    launched_at: Optional[datetime] = None


@dataclass(frozen=True, slots=True)
class ForecastInput:
    """Forecast of requests/min per minute starting at ``origin`` (lead 1 = origin).

    ``levels`` are the quantile levels, ``values[i]`` the path for ``levels[i]``.
    ``extra`` carries optional other forecast signals as (name, path) pairs, for
    example ``("long_context_share", (...))`` for the context-length mix.
    """

    origin: datetime
    levels: tuple[float, ...]
    values: tuple[tuple[float, ...], ...]
    model: str = ""
    extra: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.values) or not self.levels:
            raise ValueError("forecast needs one path per quantile level and at least one level")
        n = {len(v) for v in self.values}
        if len(n) != 1:
            raise ValueError("forecast paths differ in length")
        if list(self.levels) != sorted(self.levels):
            raise ValueError("forecast levels must be ascending")

    @property
    def horizon(self) -> int:
        return len(self.values[0])

    def path(self, q: float) -> tuple[float, ...]:
        """The path at level q, linearly interpolated between stored levels (clamped at the ends)."""
        lv = self.levels
        if q <= lv[0]:
            return self.values[0]
        if q >= lv[-1]:
            return self.values[-1]
        j = next(i for i in range(1, len(lv)) if lv[i] >= q)
        lo, hi = lv[j - 1], lv[j]
        w = 0.0 if hi == lo else (q - lo) / (hi - lo)
        return tuple(a + w * (b - a) for a, b in zip(self.values[j - 1], self.values[j]))

    def usable(self) -> bool:
        """All values finite and non-negative (a broken forecast must not drive scaling)."""
        return all(math.isfinite(v) and v >= 0 for path in self.values for v in path)

    def extra_path(self, name: str) -> Optional[tuple[float, ...]]:
        for k, v in self.extra:
            if k == name:
                return v
        return None


@dataclass(frozen=True, slots=True)
class TickInput:
    now: datetime
    instances: tuple[Instance, ...]
    observed_rpm: float                       # arrivals per minute over the last minute
    queue_depth: float = 0.0                  # requests waiting (all instances)
    p99_latency_s: Optional[float] = None     # recent P99 latency (None: unknown)
    forecast: Optional[ForecastInput] = None
    active_profile: str = ""


# --------------------------------------------------------------------------- configuration


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
        for name in ("max_step_up", "max_step_down"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 or None")
        if self.forecast_smoothing_min < 1:
            raise ValueError("forecast_smoothing_min must be >= 1")

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

    def __post_init__(self) -> None:
        if self.trigger not in ("schedule", "context_mix"):
            raise ValueError("trigger must be 'schedule' or 'context_mix'")
        if not (0.0 < self.canary_share <= 1.0):
            raise ValueError("canary_share must be in (0, 1]")

    def capacity_of(self, profile: str, fallback: float) -> float:
        for name, cap in self.profile_capacity:
            if name == profile:
                return cap
        return fallback


@dataclass(frozen=True, slots=True)
class CoreConfig:
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    dry_run: bool = False   # forecast-only mode: decide and record, apply nothing


# --------------------------------------------------------------------------- state


class SwitchPhase(str, Enum):
    STEADY = "steady"        # one profile serves everything
    PREWARM = "prewarm"      # target-profile instances are being started ahead of the switch
    CANARY = "canary"        # canary share moved; holding while P99 is compared with the baseline
    PAUSED = "paused"        # rolled back after a P99 regression; no retry until the ask changes


@dataclass(frozen=True, slots=True)
class Transition:
    at: datetime
    from_phase: SwitchPhase
    to_phase: SwitchPhase
    from_profile: str
    to_profile: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class SwitchState:
    phase: SwitchPhase = SwitchPhase.STEADY
    active_profile: str = ""
    target_profile: str = ""
    since: Optional[datetime] = None
    baseline_p99_s: Optional[float] = None
    blocked_profile: str = ""                       # target rolled back from; not retried while asked
    transitions: tuple[Transition, ...] = ()


@dataclass(frozen=True, slots=True)
class WarmupState:
    active_until: Optional[datetime] = None
    tier: str = ""
    p99_baseline_s: Optional[float] = None
    started: int = 0                                # warmups started so far (a counter for reports)


@dataclass(frozen=True, slots=True)
class PolicyState:
    last_scale_up: Optional[datetime] = None
    last_scale_down: Optional[datetime] = None
    history: tuple[tuple[datetime, int], ...] = ()  # (time, raw recommendation) inside the stabilisation window
    switch: SwitchState = field(default_factory=SwitchState)
    warmup: WarmupState = field(default_factory=WarmupState)
    scale_actions: int = 0

    @property
    def last_scale(self) -> Optional[datetime]:
        c = [as_utc(t) for t in (self.last_scale_up, self.last_scale_down) if t is not None]
        return max(c) if c else None


# --------------------------------------------------------------------------- decisions


class ScaleAction(str, Enum):
    UP = "up"
    DOWN = "down"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class GuardrailStep:
    stage: str
    before: int
    after: int
    reason: Optional[Reason]


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    current: int                       # provisioned now (booting + waking + ready)
    ready: int
    desired: int
    action: ScaleAction
    reason: Reason
    reactive_replicas: int             # what current load + queue needs
    forecast_replicas: Optional[int]   # what the forecast over the lead window needs (None: no forecast)
    raw: int                           # max of the two, before stabilisation and guardrails
    steps: tuple[GuardrailStep, ...] = ()
    remove: tuple[str, ...] = ()       # instance ids to remove first when scaling in


class WarmupAction(str, Enum):
    NONE = "none"
    START = "start"
    CONTINUE = "continue"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class WarmupDecision:
    action: WarmupAction
    reason: Reason
    tier: str = ""
    requests_per_instance: int = 0
    concurrency: int = 0
    duration_s: float = 0.0
    instances: tuple[str, ...] = ()


class SwitchAction(str, Enum):
    NONE = "none"
    PREWARM = "prewarm"          # start ``instances`` target-profile instances
    MOVE_CANARY = "move_canary"  # move ``share`` of capacity to the target profile
    MOVE_ALL = "move_all"
    ROLLBACK = "rollback"        # move the canary back to ``to_profile`` (the previous one)
    CANCEL = "cancel"            # drop pre-warmed target instances


@dataclass(frozen=True, slots=True)
class SwitchDecision:
    action: SwitchAction
    reason: Reason
    phase: SwitchPhase
    from_profile: str = ""
    to_profile: str = ""
    share: float = 0.0
    instances: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    """Something a person should hear about (an alert), with its reason."""

    at: datetime
    kind: str          # "alert" | "info"
    reason: Reason


@dataclass(frozen=True, slots=True)
class TickOutput:
    now: datetime
    scale: ScaleDecision
    warmup: WarmupDecision
    switch: SwitchDecision
    events: tuple[Event, ...]
    state: PolicyState
    applied: bool              # False in forecast-only (dry-run) mode: record, do not act
    mode: str                  # "live" | "dry_run"

    def summary(self) -> str:
        flag = "" if self.applied else " [dry-run: not applied]"
        return (f"{self.now.isoformat()} replicas {self.scale.current}->{self.scale.desired} "
                f"({self.scale.reason}); warmup {self.warmup.action.value} ({self.warmup.reason.code.value}); "
                f"switch {self.switch.action.value} ({self.switch.reason.code.value}){flag}")


MINUTE = timedelta(minutes=1)
