"""Why a decision is what it is: every decision of the core carries exactly one :class:`Reason`."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

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
    REACTIVE_GUARD = "reactive_guard"                # held at what the replaced autoscaler would hold
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
    SWITCH_MOVING = "switch_moving"                  # old retired only as target replicas are ready
    SWITCH_SETTLING = "switch_settling"              # the target serves all; the breaker still watches
    SWITCH_RESTORING = "switch_restoring"            # rollback: old capacity not ready again yet
    SWITCH_RESTORED = "switch_restored"
    SWITCH_CANCELLED = "switch_cancelled"
    SWITCH_ROLLBACK_P99 = "switch_rollback_p99"
    SWITCH_PAUSED = "switch_paused"
    SWITCH_RESUMED = "switch_resumed"
    SWITCH_NO_P99 = "switch_no_p99"
    # alert responses (warmup/core/alerts.py)
    ALERT_OPENED = "alert_opened"            # first firing notification of a group: its tier's responses
    ALERT_RAISED = "alert_raised"            # a higher tier fired in an open episode
    ALERT_ESCALATED = "alert_escalated"      # the tier's window passed and the alert still fires
    ALERT_WAITING = "alert_waiting"          # firing, handled, its tier's window not over yet
    ALERT_TOP = "alert_top_tier"             # firing at the severe tier, everything done
    ALERT_RESOLVED = "alert_resolved"
    ALERT_REOPENED = "alert_reopened"        # a resolved group's alert fires on (old startsAt, well after)
    ALERT_DUPLICATE = "alert_duplicate"      # already seen: nothing new
    ALERT_STALE = "alert_stale"              # older than what the episode already knows (reordered)


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    text: str

    def __str__(self) -> str:
        return f"{self.code.value}: {self.text}"
