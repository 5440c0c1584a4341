"""Which cold start the plan leads by: measured launches, else the stored record, else the file.

Pure, so that the workers' planner, the API's plans and KEDA answers and the what-if replay
choose the lead by one rule from the same inputs (the I/O that reads them is
``warmup.actuators.coldstart.resolve_lead``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from warmup.core.config import CoreConfig
from warmup.core.stats import quantile

RECENT = 20  # launches the P90 is taken over: recent enough to follow a new image or node type
QUANTILE = 0.9  # a high quantile, so one slow launch in ten does not leave the plan short

MEASURED, RECORD, FILE = "measured launches", "measure-coldstart record", "deployments file"


@dataclass(frozen=True)
class Lead:
    cold_start_min: float
    source: str  # measured launches | measure-coldstart record | deployments file | a caller's own
    detail: str

    def as_doc(self) -> dict[str, Any]:
        return {"cold_start_min": round(self.cold_start_min, 3), "source": self.source, "detail": self.detail}


def choose(recent_s: Sequence[float], record_min: float | None, yaml_min: float) -> Lead:
    """The lead from what is known, best first: launch-to-ready seconds, the record, the file."""
    if recent_s:
        p90 = quantile(recent_s, QUANTILE)
        return Lead(p90 / 60.0, MEASURED, f"P90 of the last {len(recent_s)} launch-to-ready times")
    if record_min is not None:
        return Lead(record_min, RECORD, "stored by `warmcast measure-coldstart`")
    return Lead(yaml_min, FILE, "cold_start_min of the deployment")


def with_lead(cfg: CoreConfig, lead: Lead) -> CoreConfig:
    """``cfg`` planning one ``lead`` ahead: the cold start replaced, its margin kept as configured."""
    return replace(cfg, scaling=replace(cfg.scaling, cold_start_min=lead.cold_start_min))


NODE_MEASURED, NODE_FILE = "measured nodes", "deployments file"


def choose_node_lead(created_to_ready_s: Sequence[float], declared_min: float) -> Lead:
    """A node pool's lead: the P90 of its recent nodes' creation-to-Ready times where the backend sees
    node objects, else the pool's declared ``node_lead_min`` (issue 45); the same rule as instances'."""
    recent = list(created_to_ready_s)[-RECENT:]
    if recent:
        p90 = quantile(recent, QUANTILE)
        return Lead(p90 / 60.0, NODE_MEASURED, f"P90 of the last {len(recent)} nodes' creation to Ready")
    return Lead(declared_min, NODE_FILE, "node_lead_min of the node pool")
