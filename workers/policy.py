"""A deployment's policy state in Redis (cooldowns, stabilisation history, switch machine,
warmup state), the short lock every decision takes around read-decide-write of it, and
whether a decision may be applied now."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, ContextManager

from warmcast.state import StateStore
from warmup.core import PolicyState
from workers.context import Ctx
from workers.locks import LockBusy, deployment_lock
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


def locked(ctx: Ctx, dep: str) -> ContextManager[Any]:
    """The short lock around read-decide-write of a deployment's policy state (all decision jobs)."""
    return _Spin(lambda: deployment_lock(ctx.r, ctx.prefix, "policy", dep, 30.0), 5.0)


class _Spin:
    """Enter a lock context, retrying for up to ``wait_s`` while it is busy."""

    def __init__(self, make, wait_s: float) -> None:
        self.make, self.wait_s, self.cm = make, wait_s, None

    def __enter__(self):
        deadline = time.monotonic() + self.wait_s
        while True:
            cm = self.make()
            try:
                got = cm.__enter__()
                self.cm = cm
                return got
            except LockBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


def why_not_applied(ctx: Ctx, dep: str) -> str | None:
    """Why a decision is recorded but not applied now (forecast-only mode, paused), or None."""
    if ctx.settings.dry_run:
        return "forecast-only mode (dry_run): decision recorded, not applied"
    paused = ctx.state.paused(dep)
    if paused:
        return f"automatic actions paused by {paused.get('by', '?')}: {paused.get('reason', '')}".rstrip(": ")
    return None
