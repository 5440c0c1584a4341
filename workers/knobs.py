"""Every knob of a deployment's policy with the value the loop decides with and the layer it comes from
(issue 42): the core's default, the deployments file (its values and its ``policy:`` knobs), the nightly
re-tune, an operator's stored override, an alert's standby floor, a stored calibration, the measured lead.

The value is read from the configuration the tick itself builds (``Ctx.cfg`` with the planner's lead),
never recomputed here; only the layer is worked out, from what each layer holds.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from workers.context import Ctx

POLICY = ("quantile", "buffer_level", "target_utilisation", "reactive_utilisation", "stabilisation_s",
          "reactive_guard", "reactive_guard_window_min")
FLEET = ("min_replicas", "max_replicas", "capacity_rpm", "cold_start_min")
KNOBS = POLICY + FLEET
LAYERS = ("default", "file", "retune", "manual", "alert", "calibration", "lead")


@dataclass(frozen=True)
class Knob:
    value: Any
    layer: str   # one of LAYERS
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "layer": self.layer, **({"detail": self.detail} if self.detail else {})}


def effective(ctx: Ctx, name: str) -> dict[str, Knob]:
    """Each knob of ``name``'s scaling policy: its value as the tick decides with it, and its layer."""
    from warmup.core import lead as core_lead
    from workers.alerting import state as alert_state

    view = ctx.view(name)   # the view a tick builds once and decides with (Ctx.pinned)
    dep, used = view.dep, view.lead
    cfg = core_lead.with_lead(view.cfg, used)
    stored = (ctx.state.get("policy-config", name) or {}).get("scaling") or {}
    retuned = (ctx.state.get("retuned", name) or {}).get("knobs") or {}
    floor = ctx.r.exists(alert_state.key(ctx.prefix, "alert-floor", name))
    filed = {**dep.policy.set_values(), "min_replicas": dep.min_replicas, "max_replicas": dep.max_replicas}
    out = {}
    for k in POLICY + ("min_replicas", "max_replicas"):
        value = getattr(cfg.scaling, k)
        if k == "min_replicas" and floor and k in stored:
            out[k] = Knob(value, "alert", "an alert's standby raised the planner's floor until it resolves")
        elif k in stored:
            out[k] = Knob(value, "retune" if k in retuned and retuned[k] == stored[k] else "manual")
        else:
            out[k] = Knob(value, "file" if k in filed else "default")
    source = cfg.switch.source_of(cfg.switch.default_profile)
    out["capacity_rpm"] = Knob(cfg.scaling.capacity_rpm, "calibration" if source != "declared" else "file",
                               f"profile {cfg.switch.default_profile}")
    measured = used.source not in ("deployments file", "a caller's own")
    out["cold_start_min"] = Knob(round(cfg.scaling.cold_start_min, 3), "lead" if measured else "file",
                                 f"{used.source}: {used.detail}" if used.detail else used.source)
    return out


def defaults() -> dict[str, Any]:
    """The core's own default of each policy knob (what a knob with no other layer holds)."""
    from warmup.core import ScalingConfig

    return {f.name: f.default for f in fields(ScalingConfig) if f.name in POLICY}
