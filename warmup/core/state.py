"""Policy state: what the core remembers between ticks (cooldowns, the stabilisation
history, the switch state machine, the warmup state).  It arrives in each call and the
updated copy leaves in the decision's output."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Optional

from warmup.core.buffer import BufferState
from warmup.core.hpa import HPAState
from warmup.core.inputs import as_utc
from warmup.core.reasons import Reason


class SwitchPhase(str, Enum):
    STEADY = "steady"        # one profile serves everything
    PREWARM = "prewarm"      # target-profile instances are being started ahead of the switch
    CANARY = "canary"        # canary share moved; holding while P99 is compared with the baseline
    MOVE = "move"            # old-profile replicas retired only as target replicas become ready
    SETTLE = "settle"        # the target serves everything; still watched until it has held
    ROLLBACK = "rollback"    # the old profile's ready capacity restored before the target is retired
    PAUSED = "paused"        # rolled back after a P99 regression; no retry until the ask changes


IN_SWITCH = (SwitchPhase.PREWARM, SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.SETTLE, SwitchPhase.ROLLBACK)


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
    need_rpm: Optional[float] = None                # capacity (req/min) the switch keeps ready throughout
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
    hpa: HPAState = field(default_factory=HPAState)   # the replaced autoscaler, followed (warmup/core/hpa.py)
    buffer: BufferState = field(default_factory=BufferState)  # the warm buffer's adaptation (warmup/core/buffer.py)

    @property
    def last_scale(self) -> Optional[datetime]:
        c = [as_utc(t) for t in (self.last_scale_up, self.last_scale_down) if t is not None]
        return max(c) if c else None
