"""Shadow mode's comparison (issue 30): the fleet the current autoscaler ran, beside the fleet
warmcast's plan would have run, from the per-minute shadow records alone.  Pure: records in,
figures out; reading Redis, re-simulating warmcast's fleet and writing files are the edges'
(``workers.shadow``, ``workers.shadow_report``).

A record is written by the tick at the start of minute ``t`` in forecast-only mode: the fleet as
read then (ready, provisioned, queue depth, TTFT P99), the arrivals of the last whole minute
(``t - 1``), warmcast's decision at ``t`` (desired, current) and its audit id.  So the minute
``m`` is described by two records: the one at ``m`` (the decision taken at its start, its evidence)
and the one at ``m + 1`` (its arrivals; the provisioned count after the scaler's change at ``m``).
An instance counts as serving ``m`` when it was ready at both readings, the lower of the two: a
boot finishing or an instance removed mid-minute is not counted as serving the whole minute.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from warmcast.errors import StateError
from warmup.sim.fleet import FleetParams, serve_minute

TS = "%Y-%m-%d %H:%M"
MINUTE = timedelta(minutes=1)
NEEDED = ("arrivals", "ready", "provisioned")   # without these a minute cannot be compared
SHOWN = 20                                      # minutes listed with their audit ids per claim


@dataclass(frozen=True)
class ShadowMinutes:
    """The minutes the records describe, as arrays (one entry per minute)."""

    times: tuple[datetime, ...]
    arrivals: np.ndarray
    provisioned: np.ndarray
    ready: np.ndarray
    desired: np.ndarray          # warmcast's decision at the start of the minute (live, in forecast-only mode)
    audit_ids: tuple[str, ...]   # that decision's audit entry
    p99_s: np.ndarray            # the TTFT P99 read at the minute's end (NaN: none read)
    queue0: float                # the backlog at the first minute's start
    models: tuple[str, ...]      # forecast models the live decisions used
    capacity_rpm: Optional[np.ndarray] = None   # per instance, the live profile's as the tick read it (NaN: none)


def parse_minute(text: str) -> datetime:
    return datetime.strptime(text[:16].replace("T", " "), TS)


def minutes_from(records: Sequence[Mapping[str, Any]], dep: str, since: datetime, until: datetime) -> ShadowMinutes:
    """The minutes of ``records`` (sorted or not, each with ``minute``), refusing what cannot be compared."""
    recs = sorted(records, key=lambda r: r["minute"])
    where = f"deployment {dep!r} between {since:%Y-%m-%d %H:%M} and {until:%Y-%m-%d %H:%M} UTC"
    if len(recs) < 2:
        found = "no shadow records" if not recs else f"only one shadow record ({recs[0]['minute']})"
        raise StateError(f"{found} for {where}: a minute is compared from the records at its start and end, "
                         "written by the tick in forecast-only mode (dry_run); pick a window the loop ran in "
                         "forecast-only mode with --since/--until")
    _check_gaps(recs, where)
    _check_fields(recs, where)
    nxt = recs[1:]
    return ShadowMinutes(
        times=tuple(parse_minute(r["minute"]) for r in recs[:-1]),
        arrivals=np.array([float(r["arrivals"]) for r in nxt]),
        provisioned=np.array([int(r["provisioned"]) for r in nxt], dtype=np.int64),
        ready=np.array([min(int(a["ready"]), int(b["ready"])) for a, b in zip(recs, nxt)], dtype=np.int64),
        desired=np.array([int(r["desired"]) for r in recs[:-1]], dtype=np.int64),
        audit_ids=tuple(str(r.get("audit_id") or "") for r in recs[:-1]),
        p99_s=np.array([np.nan if r.get("p99_s") is None else float(r["p99_s"]) for r in nxt]),
        queue0=float(recs[0].get("queue_depth") or 0.0),
        models=tuple(sorted({str(r.get("forecast_model")) for r in recs if r.get("forecast_model")})),
        capacity_rpm=np.array([np.nan if r.get("capacity_rpm") is None else float(r["capacity_rpm"])
                               for r in recs[:-1]]))


def live_capacity(mins: ShadowMinutes, default_rpm: float) -> np.ndarray:
    """Per instance and minute, the capacity of the profile live then (the tick's record at the minute's
    start), else ``default_rpm``: the default profile's figure made a night fleet read as day's (issue 46)."""
    cap = mins.capacity_rpm if mins.capacity_rpm is not None else np.full(len(mins.times), np.nan)
    return np.where(np.isfinite(cap), cap, default_rpm)


def _check_gaps(recs: Sequence[Mapping[str, Any]], where: str) -> None:
    """Refuse missing minutes between the first and the last record: filling them would invent load."""
    times = [parse_minute(r["minute"]) for r in recs]
    gaps = [(a + MINUTE, b - MINUTE) for a, b in zip(times, times[1:]) if b - a > MINUTE]
    if not gaps:
        return
    missing = sum(int((b - a) / MINUTE) + 1 for a, b in gaps)
    shown = ", ".join(f"{a:%Y-%m-%d %H:%M}" + ("" if a == b else f"..{b:%H:%M}") for a, b in gaps[:5])
    more = f" and {len(gaps) - 5} more gap(s)" if len(gaps) > 5 else ""
    raise StateError(f"gaps in the shadow record of {where}: {missing} minute(s) missing ({shown}{more}); the "
                     "tick recorded nothing then (workers stopped, not in forecast-only mode, or records expired). "
                     "Nothing is filled in: report a window without gaps with --since/--until")


def _check_fields(recs: Sequence[Mapping[str, Any]], where: str) -> None:
    """Refuse records lacking what a comparison needs (an arrivals count, the fleet's reading)."""
    # the first record's arrivals and provisioned count are of the minute before the window: never used
    bad = {f: [r["minute"] for r in (recs if f == "ready" else recs[1:])
               if r.get(f) is None or (f == "arrivals" and not np.isfinite(float(r[f])))] for f in NEEDED}
    bad = {f: m for f, m in bad.items() if m}
    if bad:
        what = "; ".join(f"{f} missing at {len(m)} tick(s) ({', '.join(x[:16] for x in m[:3])}"
                         + (", ..." if len(m) > 3 else "") + ")" for f, m in bad.items())
        raise StateError(f"incomplete shadow records for {where}: {what}; the signals or the recorded arrivals "
                         "were unavailable at those ticks. Nothing is filled in: report a window without them")


def actual_late(mins: ShadowMinutes, params: FleetParams, capacity_rpm: Optional[np.ndarray] = None) -> np.ndarray:
    """Late requests per minute of the actual fleet: the recorded arrivals served by its ready instances,
    each serving ``capacity_rpm`` of its minute (default: ``params.capacity_rpm`` throughout)."""
    cap = np.full(len(mins.times), params.capacity_rpm) if capacity_rpm is None else capacity_rpm
    late, q = np.zeros(len(cap)), mins.queue0
    for t, (n, a, c) in enumerate(zip(mins.ready.tolist(), mins.arrivals.tolist(), cap.tolist())):
        q, late[t], _ = serve_minute(q, [a], n * c / 60.0, 60.0, params.wait_threshold_s)
    return late


@dataclass(frozen=True)
class Fleet:
    """One side's fleet per minute: provisioned and ready instances, serving capacity, late requests."""

    provisioned: np.ndarray
    ready: np.ndarray
    capacity_rpm: np.ndarray
    late: np.ndarray
    standby: Optional[np.ndarray] = None   # GPU-equivalents held asleep (warmcast's asleep tier)


def compare(mins: ShadowMinutes, actual: Fleet, warmcast: Fleet) -> dict[str, Any]:
    """Instance-hours, minutes short on one side and covered on the other (with audit ids), late requests."""
    demand = mins.arrivals
    short_a = demand > actual.capacity_rpm + 1e-9
    short_w = demand > warmcast.capacity_rpm + 1e-9
    total = float(demand.sum())
    return {
        "minutes": len(mins.times), "requests": int(round(total)),
        "actual": _side(actual, demand), "warmcast": _side(warmcast, demand),
        "instance_hours_saved": round((float(actual.provisioned.sum()) - float(warmcast.provisioned.sum())) / 60.0, 3),
        "short_actual_covered_by_warmcast": _claim(mins, short_a & ~short_w, actual, warmcast),
        "short_warmcast_covered_by_actual": _claim(mins, short_w & ~short_a, actual, warmcast),
        "short_both": int(np.count_nonzero(short_a & short_w)),
        "ttft_p99_recorded": _p99(mins.p99_s),
    }


def _side(f: Fleet, demand: np.ndarray) -> dict[str, Any]:
    total = float(demand.sum())
    return {"instance_hours": round(float(f.provisioned.sum()) / 60.0, 3),
            "asleep_instance_hours": round(float(f.standby.sum()) / 60.0, 3) if f.standby is not None else 0.0,
            "mean_provisioned": round(float(f.provisioned.mean()), 3), "max_provisioned": int(f.provisioned.max()),
            "minutes_short": int(np.count_nonzero(demand > f.capacity_rpm + 1e-9)),
            "late_requests": round(float(f.late.sum()), 1),
            "late_share": float(f.late.sum() / total) if total > 0 else 0.0}


def _claim(mins: ShadowMinutes, mask: np.ndarray, actual: Fleet, warmcast: Fleet) -> dict[str, Any]:
    """A count of minutes and, for the first ``SHOWN``, the evidence: the minute's figures and the
    audit id of warmcast's live decision at its start."""
    idx = np.flatnonzero(mask)
    rows = [{"minute": mins.times[i].strftime(TS), "arrivals": float(mins.arrivals[i]),
             "actual_ready": int(actual.ready[i]), "warmcast_ready": int(warmcast.ready[i]),
             "live_desired": int(mins.desired[i]), "audit_id": mins.audit_ids[i]} for i in idx[:SHOWN]]
    return {"minutes": int(len(idx)), "shown": rows}


def _p99(p99: np.ndarray) -> dict[str, Any]:
    ok = np.isfinite(p99)
    if not ok.any():
        return {"minutes_with_reading": 0, "max_s": None, "median_s": None}
    return {"minutes_with_reading": int(ok.sum()), "max_s": round(float(p99[ok].max()), 3),
            "median_s": round(float(np.median(p99[ok])), 3)}


def limits(mins: ShadowMinutes, since: datetime, until: datetime, *, forecaster: str, capacity_rpm: float,
           capacity_source: str, wait_s: float) -> list[str]:
    """What the report cannot say, in words (the report prints them beside its figures)."""
    first, last = mins.times[0], mins.times[-1]
    live = live_capacity(mins, capacity_rpm)
    per = (f"{capacity_rpm:g} req/min per ready instance, {capacity_source}" if np.all(live == capacity_rpm) else
           f"per ready instance the live profile's capacity as each tick recorded it, {live.min():g}.."
           f"{live.max():g} req/min")
    out = [
        "The arrivals are those the actual fleet received: where its queue made clients retry or give up, "
        "they are already shaped by it, and warmcast's fleet is replayed on the same arrivals.",
        f"Late requests on both sides are the simulator's estimate (one FIFO queue, {per}; late = waiting over "
        f"{wait_s:g} s), not measured; the recorded TTFT P99 is shown beside them where the signals had one.",
        f"warmcast's fleet is re-simulated over these arrivals with forecaster {forecaster} (as `warmcast backtest "
        "fleet` would); live, its decisions used " + (", ".join(mins.models) or "no stored forecast") + ". Its live "
        "decisions (the audit ids) were made against the actual fleet, so their targets can differ from the "
        "re-simulated fleet's minute by minute.",
        "The actual fleet's ready instances in a minute are the lower of the readings at its start and end; its "
        "instance-hours count provisioned instances (booting included) as read at each minute's end.",
        "Instance-hours are instances held, not GPU-hours (multiply by the deployment's GPUs per instance).",
    ]
    if first > since or last + MINUTE < until:
        out.append(f"The records cover {first:%Y-%m-%d %H:%M}..{last:%Y-%m-%d %H:%M} UTC of the window asked for "
                   f"({since:%Y-%m-%d %H:%M}..{until:%Y-%m-%d %H:%M}); nothing outside them is compared.")
    return out
