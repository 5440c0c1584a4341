"""A journaled tick's whole output applied through the deployment's actuators, in the order a fleet
needs it: wakes before launches, the scale target (or, while a profile switch runs, replicas per
profile), the asleep target, then the warmup runs.  Each part says what happened, for the audit."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from warmup.core import SwitchDecision, WarmupAction, WarmupDecision
from workers import apply
from workers.context import Ctx
from workers.serde import from_json


@dataclass(frozen=True)
class Applied:
    """What one tick did, part by part (None: that part asked for nothing)."""

    scale: str
    actual: Optional[int]
    switch: Optional[tuple[bool, str]] = None
    sleep: Optional[str] = None
    warmup: Optional[str] = None
    warmup_targets: list[str] = field(default_factory=list)


def tick(ctx: Ctx, dep: str, journal: dict[str, Any], recovered: bool) -> Applied:
    """Apply every field of a journaled tick (nothing where forecast-only or paused: the reason)."""
    sw = from_json(SwitchDecision, journal["switch"])
    wd = from_json(WarmupDecision, journal["warmup"])
    moved = sw.action.value != "none" or journal["events"] or journal["phase"] != journal["phase_before"]
    targets = new_targets(ctx, dep, wd)
    wants_warmup = wd.action is WarmupAction.STOP or bool(targets)
    if not journal["apply"]:
        why = journal["blocked"]
        return Applied(why, apply.current_or_none(ctx.scaler(dep)), (False, why) if moved else None, None,
                       why if wants_warmup else None, targets)
    if sw.replicas:  # a switch sets replicas per profile this tick: the planner's count waits for it
        switched = apply.switch(ctx, dep, sw)
        held = (f"held: a profile switch to {sw.to_profile or '?'} is in its {sw.phase.value} phase; "
                "the tick sets replicas per profile until it ends")
        scale_out, actual = held, apply.current_or_none(ctx.scaler(dep))
        # the asleep tier keeps its target through a switch, as the simulator's one loop keeps it
        # (issue 42: dropping it here made the replay hold one more asleep than the backtest)
        slept = asleep_target(ctx, dep, journal["decision"], None)
    else:
        switched = apply.switch(ctx, dep, sw) if moved else None
        woke = wake(ctx, dep, journal["decision"])
        scale_out, actual = apply.scale(ctx, dep, journal, recovered)
        slept = asleep_target(ctx, dep, journal["decision"], woke)
    if switched and switched[0] and not switched[1].startswith(("no change", "nothing to apply")):
        ctx.scaler(dep).note_switch(journal["tick"], switched[1])
    sig = ctx.state.get("signals", dep) or {}
    warmed = apply.warmup(ctx, dep, wd, sig, targets) if wants_warmup else None
    return Applied(scale_out, actual, switched, slept, warmed, targets)


def wake(ctx: Ctx, dep: str, d: dict[str, Any]) -> Optional[str]:
    """Wake the asleep instances the decision names, before any launch (None: none named)."""
    ids = [str(i) for i in d.get("wake", ())]
    if not ids:
        return None
    backend = apply.backend(ctx, dep)
    if not _can_sleep(backend):
        return refused(ctx, dep, backend, f"wake {len(ids)}")
    n = backend.wake(ids)
    return f"woke {n} of {len(ids)} asleep instance(s)"


def asleep_target(ctx: Ctx, dep: str, d: dict[str, Any], woke: Optional[str]) -> Optional[str]:
    """Keep the decision's asleep target (the warm buffer kept asleep) on a backend with sleep mode,
    every tick (a target: instances booting to sleep count towards it); elsewhere say why not, when
    the tier was asked for anything.  None: nothing to say."""
    target, asleep = int(d.get("asleep_target", 0)), int(d.get("asleep", 0))
    backend = apply.backend(ctx, dep)
    if not _can_sleep(backend):
        if woke is not None:
            return woke
        return refused(ctx, dep, backend, f"keep {target} asleep") if target or asleep else None
    now = backend.set_asleep(target)
    if target == asleep == now and woke is None:
        return None
    return "; ".join(x for x in (woke, f"asleep {asleep} -> {now} (target {target})") if x)


def _can_sleep(backend: Any) -> bool:
    """A backend with sleep mode: it can wake and keep a target asleep (a simulated fleet only when the
    deployment has an asleep tier)."""
    return hasattr(backend, "set_asleep") and hasattr(backend, "wake") and getattr(backend, "wake_s", 0) is not None


def refused(ctx: Ctx, dep: str, backend: Any, what: str) -> str:
    """Why the asleep tier cannot be applied on this backend (an instance's own answer where it has URLs)."""
    kind = "simulated fleet" if ctx.simulate else f"{ctx.dep(dep).scaler.kind} scaler"
    why = f"the {kind} has no sleep mode"
    urls = getattr(backend, "urls", None)
    if urls is not None:
        why = _vllm_sleep_reason(urls()) or why
    return f"not applied ({what}): {why}"


def _vllm_sleep_reason(urls: list[str]) -> Optional[str]:
    """The first instance's own word on sleep mode (vLLM on CPU refuses it), or None when it has it."""
    if not urls:
        return None
    from warmup.actuators.vllm_client import VLLMClient

    async def ask() -> Any:
        async with VLLMClient(urls[0]) as c:
            return await c.sleep_support()

    try:
        support = asyncio.run(ask())
    except Exception as err:  # noqa: BLE001 - an unreachable instance: say so, apply nothing
        return f"could not ask {urls[0]} about sleep mode: {err}"
    return None if support.available else support.reason


def new_targets(ctx: Ctx, dep: str, wd: Any) -> list[str]:
    """Instances a START/CONTINUE asks for that this warmup episode has not sent to yet.

    An episode starts with START and ends with STOP or NONE; a change of tier inside it (a ramp
    becoming a queue tier, low becoming high) sends to every target again at the new intensity.
    """
    key = f"{ctx.prefix}:warmup-episode:{dep}"
    if wd.action not in (WarmupAction.START, WarmupAction.CONTINUE) or not wd.instances:
        ctx.r.delete(key)
        return []
    raw = ctx.r.get(key)
    ep = {} if raw is None else json.loads(raw)
    if wd.action == WarmupAction.START or ep.get("tier") != wd.tier:
        ep = {"tier": wd.tier, "sent": []}
    fresh = [i for i in wd.instances if i not in ep["sent"]]
    ep["sent"] = ep["sent"] + fresh
    ctx.r.set(key, json.dumps(ep), ex=600)
    return fresh
