"""Shadow records (issue 30): in forecast-only mode, one compact record per minute and deployment
holding what the fleet really had beside what warmcast decided, so ``warmcast report shadow`` can
compare the two (the comparison itself is pure: :mod:`warmup.sim.shadow`).

One Redis hash per deployment and UTC day (``<prefix>:shadow:<dep>:<YYYY-MM-DD>``), one field per
tick minute, kept ``retention_days`` (the load store's retention: a report needs the arrivals'
history too).  The fleet's side comes from the signals the tick already gathered (the instances
the signals see: ready, provisioned; queue depth, TTFT P99) and the last whole minute's recorded
arrivals; warmcast's side is the journaled decision and its audit entry's id (the evidence).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Optional

from workers.context import Ctx

TS = "%Y-%m-%d %H:%M"


def key(prefix: str, dep: str, day: str) -> str:
    return f"{prefix}:shadow:{dep}:{day}"


def record(ctx: Ctx, dep: str, journal: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Write the shadow record of a finished tick when the deployment is in forecast-only mode
    (None: not in forecast-only mode, nothing written; a paused live loop is no shadow)."""
    if not ctx.settings.dry_run:
        return None
    inp, d = journal["inputs"], journal["decision"]
    minute = journal["tick"].replace("T", " ")[:16]
    rec = {"minute": minute, "audit_id": _audit_id(ctx, dep, journal["tick"]),
           "arrivals": _finite(inp.get("observed_rpm")), "arrivals_source": inp.get("load_source"),
           "ready": inp.get("ready"), "provisioned": inp.get("provisioned"), "fleet_source": "signals",
           "queue_depth": inp.get("queue_depth"), "p99_s": inp.get("p99_s"),
           "desired": int(d["desired"]), "current": int(d["current"]), "capacity_rpm": inp.get("capacity_rpm"),
           "forecast_model": inp.get("forecast_model")}
    k = key(ctx.prefix, dep, minute[:10])
    pipe = ctx.r.pipeline(transaction=True)
    pipe.hset(k, minute, json.dumps(rec))
    pipe.expire(k, int(ctx.settings.retention_days) * 86400)
    pipe.execute()
    return rec


def _finite(x: Any) -> Optional[float]:
    """A count, or None where none was recorded (NaN never reaches a report as a number)."""
    if x is None:
        return None
    x = float(x)
    return x if x == x and x not in (float("inf"), float("-inf")) else None


def _audit_id(ctx: Ctx, dep: str, tick: str) -> str:
    """The id of this tick's scale audit entry (written just before, with the tick in its inputs)."""
    for sid, f in ctx.r.xrevrange(ctx.state.key("audit", dep), count=20):
        if f.get(b"kind") == b"scale" and json.loads(f.get(b"inputs", b"{}")).get("tick") == tick:
            return sid.decode() if isinstance(sid, bytes) else str(sid)
    return ""


def read(r: Any, prefix: str, dep: str, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """The records with a minute in [since, until] (naive UTC), oldest first."""
    lo, hi = since.strftime(TS), until.strftime(TS)
    out: list[dict[str, Any]] = []
    day = since.replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= until:
        for field, raw in r.hgetall(key(prefix, dep, day.strftime("%Y-%m-%d"))).items():
            m = field.decode() if isinstance(field, bytes) else field
            if lo <= m <= hi:
                out.append(json.loads(raw))
        day += timedelta(days=1)
    return sorted(out, key=lambda x: x["minute"])


def deployments_with_records(r: Any, prefix: str) -> list[str]:
    """Deployments that hold any shadow record (for a message naming where records are)."""
    seen = {k.decode().rsplit(":", 2)[-2] for k in r.scan_iter(f"{prefix}:shadow:*", count=1000)}
    return sorted(seen)
