"""Decisions the core hands out: scale, warmup, switch, alerts and the whole tick's output."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Optional

from warmup.core.reasons import Reason
from warmup.core.state import PolicyState, SwitchPhase


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
    wake: tuple[str, ...] = ()         # asleep instance ids to wake (before any launch) when scaling up
    buffer: int = 0                    # warm-buffer replicas sized from the forecast's recent errors
    asleep: int = 0                    # instances asleep now (not counted in ``current``)
    asleep_target: int = 0             # instances to keep asleep (the buffer, where it is kept asleep)
    shift: str = ""                    # evidence of a level shift the forecast missed ("" : none seen)


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
    MOVE_ALL = "move_all"        # retire the old profile as the target becomes ready
    SETTLED = "settled"          # the target held through the settle window: it is the active profile
    ROLLBACK = "rollback"        # restore ``to_profile`` (the previous one), then retire the target
    RESTORED = "restored"        # the previous profile's ready capacity is back: the target is retired
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
    # Replicas per profile this tick (during a switch; empty when the planner alone sizes the fleet).
    # The actuator raises before it lowers, so ready capacity never dips below ``need_rpm``.
    replicas: tuple[tuple[str, int], ...] = ()
    # The target's whole need in replicas (0: none): a single workload cannot run a canary share and
    # rolls all of it at once, so it sizes from this, not from the canary's count in ``replicas``.
    target_need: int = 0
    # A weighted route's backend weights (percent) per profile this tick (empty: round robin, or no switch).
    weights: tuple[tuple[str, int], ...] = ()


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
