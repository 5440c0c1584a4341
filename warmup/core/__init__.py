"""The pure decision core: pre-scaling, tiered warmup and profile switching.

No I/O anywhere in this package (``tests/test_layout.py`` walks the
AST of every module and fails on an I/O import): ``now``, the load, the forecast
and the policy state come in as values, and decisions plus the new state go out.
"""
from warmup.core.engine import decide, planning_capacity
from warmup.core.plan import PlanStep, plan_replicas
from warmup.core.prescale import decide_scale, forecast_need, reactive_need, replicas_for, scale_in_order
from warmup.core.switching import decide_switch, scheduled_profile
from warmup.core.config import (
    ContextMixRule,
    CoreConfig,
    ScalingConfig,
    ScheduleWindow,
    SwitchConfig,
    WarmupConfig,
    WarmupTier,
)
from warmup.core.decisions import (
    Event,
    ScaleAction,
    ScaleDecision,
    SwitchAction,
    SwitchDecision,
    TickOutput,
    WarmupAction,
    WarmupDecision,
)
from warmup.core.inputs import ForecastInput, Instance, InstanceState, TickInput
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.state import (
    PolicyState,
    SwitchPhase,
    SwitchState,
    Transition,
    WarmupState,
)
from warmup.core.warmup import decide_warmup, select_targets, tier_for_depth, warmup_duration_s

__all__ = [
    "ContextMixRule", "CoreConfig", "Event", "ForecastInput", "Instance", "InstanceState", "PlanStep", "PolicyState",
    "Reason", "ReasonCode", "ScaleAction", "ScaleDecision", "ScalingConfig", "ScheduleWindow", "SwitchAction",
    "SwitchConfig", "SwitchDecision", "SwitchPhase", "SwitchState", "TickInput", "TickOutput", "Transition",
    "WarmupAction", "WarmupConfig", "WarmupDecision", "WarmupState", "WarmupTier", "decide", "decide_scale",
    "decide_switch", "decide_warmup", "forecast_need", "plan_replicas", "planning_capacity", "reactive_need", "replicas_for",
    "scale_in_order", "scheduled_profile", "select_targets", "tier_for_depth", "warmup_duration_s",
]
