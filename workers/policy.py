"""A deployment's policy state in Redis (cooldowns, stabilisation history, switch machine,
warmup state), the short lease every decision takes around read-decide-write of it, and
whether a decision may be applied now."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, ContextManager

from warmcast.state import StateStore
from warmup.core import PolicyState
from workers.context import Ctx
from workers.locks import Lease, lease
from workers.serde import policy_state_from_json, to_json


def load(state: StateStore, dep: str) -> tuple[PolicyState, dict[str, Any]]:
    """(policy state, the whole stored document) of ``dep``; the initial state when none is stored."""
    doc = state.get("policy", dep) or {}
    return policy_state_from_json(doc.get("state")), doc


def document(ps: PolicyState, old: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The document to store for ``ps``, keeping the other keys of ``old`` (manual profile ...)."""
    return {**old, **extra, "state": to_json(ps), "updated": time.time()}


def without_scale_action(old: PolicyState, new: PolicyState) -> PolicyState:
    """``new`` with the cooldown bookkeeping of ``old``: for a scale decision that was not applied
    (forecast-only mode, paused), so the cooldowns do not think an action happened."""
    return replace(new, last_scale_up=old.last_scale_up, last_scale_down=old.last_scale_down,
                   scale_actions=old.scale_actions)


def locked(ctx: Ctx, dep: str) -> ContextManager[Lease]:
    """The short lease around read-decide-write of a deployment's policy state (all decision jobs)."""
    return lease(ctx.r, ctx.prefix, "policy", dep, ctx.options.lease_s, wait_s=5.0)


def why_not_applied(ctx: Ctx, dep: str) -> str | None:
    """Why a decision is recorded but not applied now (forecast-only mode, paused), or None."""
    if ctx.settings.dry_run:
        return "forecast-only mode (dry_run): decision recorded, not applied"
    paused = ctx.state.paused(dep)
    if paused:
        return f"automatic actions paused by {paused.get('by', '?')}: {paused.get('reason', '')}".rstrip(": ")
    return None
