"""``warmcast report shadow`` and ``GET /v1/deployments/{name}/shadow``: the edge around the pure
comparison (:mod:`warmup.sim.shadow`).  It reads the shadow records and the load store's history,
re-simulates warmcast's fleet over the recorded arrivals as ``warmcast backtest fleet --deployment
FILE --name D --stored-calibrations --stored-policy --policies predictive`` would (the same
configuration, :func:`workers.replay.deployment_config`), and writes the report's files.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from warmcast.config.settings import Settings
from warmcast.errors import InputError, NotFoundError, StateError
from warmup.sim import shadow as cmp
from workers import shadow
from workers.context import Ctx
from workers.options import WorkerOptions


@dataclass
class ShadowReport:
    doc: dict[str, Any]            # report.json
    minutes: pd.DataFrame          # minutes.csv: both fleets per minute, with the audit ids
    title: str


EPOCH = pd.Timestamp("1970-01-01")   # no load, record or audit entry lies before the Unix epoch


class WindowError(InputError):
    """A bad ``since`` or ``until``; ``param`` names it, so the API locates its 422 at the query
    parameter and the CLI at the option (``--since``)."""

    def __init__(self, param: str, msg: str) -> None:
        super().__init__(f"--{param} {msg}")
        self.param, self.msg = param, msg


def parse_window(since: str, until: Optional[str], now: datetime) -> tuple[datetime, datetime]:
    """(since, until) as naive UTC minutes; ``since`` a duration back from ``until`` (7d, 12h, 90m) or a time."""
    end = parse_time(until, "until") if until is not None else now.replace(second=0, microsecond=0)
    text = since.strip().lower()
    if text[:-1].isdigit() and text[-1:] in ("d", "h", "m") and int(text[:-1]) > 0:
        step = {"d": "days", "h": "hours", "m": "minutes"}[text[-1]]
        start = end - timedelta(**{step: int(text[:-1])})
    else:
        start = parse_time(since, "since")
    if start >= end:
        raise WindowError("since", f"{since!r} must lie before --until ({end:%Y-%m-%d %H:%M} UTC)")
    return start, end


def parse_time(text: str, param: str) -> datetime:
    """``text`` as a naive UTC minute, or a WindowError naming ``param``: the one parser of the shadow
    window's times.  pandas reads '' and 'NaN' as NaT and '-1' as the year -1 without an error, and
    those went on into the report as a 500 (issue 41), so each is refused here by name."""
    if not text.strip():
        raise WindowError(param, f"{text!r} is empty: give a time (UTC) or a duration like 7d, 12h or 90m")
    try:
        t = pd.Timestamp(text.strip())
    except (ValueError, TypeError, OverflowError) as err:
        raise WindowError(param, f"{text!r} is not a time or a duration like 7d, 12h or 90m ({err})") from None
    if t is pd.NaT:
        raise WindowError(param, f"{text!r} is not a time (NaN): give a time (UTC) or a duration like 7d")
    if t.tzinfo is not None:
        t = t.tz_convert("UTC").tz_localize(None)
    if t < EPOCH:
        raise WindowError(param, f"{text!r} lies before 1970-01-01 (a negative time?)")
    return t.floor("min").to_pydatetime()


def build(settings: Settings, name: str, since: datetime, until: datetime, forecaster: str,
          client: Any = None) -> ShadowReport:
    """The shadow report of deployment ``name`` over [since, until] (naive UTC)."""
    from warmup.sim.backtest import run_backtest
    from workers.coreconfig import live_core_config
    from workers.replay import deployment_config

    ctx = Ctx(settings, WorkerOptions(), client)
    dep = ctx.dep(name)   # an unknown deployment: refused with the known ones
    records = shadow.read(ctx.r, ctx.prefix, name, since, until)
    if not records:
        ctx, records = _simulated(ctx, name, since, until)
    if not records:
        _explain_none(ctx, name, since, until)
    mins = cmp.minutes_from(records, name, since, until)
    first, end = pd.Timestamp(mins.times[0]), pd.Timestamp(mins.times[-1]) + pd.Timedelta(minutes=1)
    cfg = deployment_config(live_core_config(ctx.r, ctx.prefix, dep), dep, first, end, forecaster, decisions=False)
    result = run_backtest(_load(ctx, name, mins), cfg)
    run, params = result.runs["predictive"], cfg.fleet_params()
    per = run.capacity if run.capacity is not None else np.full(len(run.ready), cfg.capacity_rpm)
    wc = cmp.Fleet(run.provisioned, run.ready, run.ready * per, run.late, run.standby)
    live = cmp.live_capacity(mins, cfg.capacity_rpm)   # the profile live each minute, not the default's
    actual = cmp.Fleet(mins.provisioned, mins.ready, mins.ready * live, cmp.actual_late(mins, params, live))
    figures = cmp.compare(mins, actual, wc)
    source = cfg.capacity_source if cfg.core is None else cfg.core.switch.source_of(cfg.core.switch.default_profile)
    doc = {"deployment": name, "key_prefix": ctx.prefix,
           "window": {"since": f"{since:%Y-%m-%d %H:%M}", "until": f"{until:%Y-%m-%d %H:%M}"},
           "compared": {"first_minute": f"{mins.times[0]:%Y-%m-%d %H:%M}",
                        "last_minute": f"{mins.times[-1]:%Y-%m-%d %H:%M}"},
           "capacity_rpm": cfg.capacity_rpm, "capacity_source": source, "late_wait_s": cfg.wait_threshold_s,
           "forecaster": result.meta.get("forecaster", forecaster), **figures,
           "warmcast_backtest_row": result.rows["predictive"],
           "limits": cmp.limits(mins, since, until, forecaster=forecaster, capacity_rpm=cfg.capacity_rpm,
                                capacity_source=source or "declared", wait_s=cfg.wait_threshold_s)}
    return ShadowReport(doc, _minutes_frame(mins, actual, wc), f"{name}: actual fleet vs warmcast's plan")


def _simulated(ctx: Ctx, name: str, since: datetime, until: datetime) -> tuple[Ctx, list[dict[str, Any]]]:
    """Where the settings' key prefix holds no record in the window, the records of ``warmcast run
    --simulate`` under the same settings (its own prefix, ``<prefix>:sim``), as the README's command
    expects to find them (issue 46); the context to read them with, or the first one and none."""
    from workers.simulate import simulation_settings

    sim = Ctx(simulation_settings(ctx.settings), WorkerOptions(), ctx.r)
    records = shadow.read(sim.r, sim.prefix, name, since, until)
    return (sim, records) if records else (ctx, [])


def _explain_none(ctx: Ctx, name: str, since: datetime, until: datetime) -> None:
    """No record in the window: say whether the deployment is in forecast-only mode and where records are."""
    days = sorted(k.decode().rsplit(":", 1)[-1] for k in ctx.r.scan_iter(f"{ctx.prefix}:shadow:{name}:*"))
    held = f"; it holds shadow records on {', '.join(days[:10])}" if days else "; it holds no shadow records at all"
    window = f"between {since:%Y-%m-%d %H:%M} and {until:%Y-%m-%d %H:%M} UTC"
    if not ctx.settings.dry_run:
        raise StateError(f"deployment {name!r} is not in forecast-only mode (dry_run is false in these settings) and "
                         f"has no shadow records {window}{held}. Shadow records are written only in forecast-only "
                         "mode: run the loop with WARMCAST_DRY_RUN=true beside the current autoscaler, then report")
    raise StateError(f"no shadow records for deployment {name!r} {window}{held}; the tick writes one a minute in "
                     "forecast-only mode while the workers run: pick a window they ran in with --since/--until")


def _load(ctx: Ctx, name: str, mins: cmp.ShadowMinutes) -> Any:
    """The arrivals to replay: the load store's history before the first compared minute (what the
    forecaster learns from) and the recorded arrivals of the compared minutes."""
    from warmup.sim.data import from_series

    first = pd.Timestamp(mins.times[0])
    try:
        history = ctx.store.series(name, "requests", end=first).dropna()
    except NotFoundError:
        history = pd.Series(dtype=float)
    if history.empty:
        raise StateError(f"no load history for deployment {name!r} before {first:%Y-%m-%d %H:%M}: warmcast's fleet "
                         "is re-simulated with forecasts learnt from it (ingest the deployment's log first)")
    recorded = pd.Series(mins.arrivals, index=pd.DatetimeIndex(list(mins.times), name="time"), name="requests")
    return from_series(pd.concat([history, recorded]), source=f"load store and shadow records of {name}")


def _minutes_frame(mins: cmp.ShadowMinutes, actual: cmp.Fleet, wc: cmp.Fleet) -> pd.DataFrame:
    return pd.DataFrame({
        "minute": [t.strftime(cmp.TS) for t in mins.times], "arrivals": mins.arrivals,
        "actual_provisioned": actual.provisioned, "actual_ready": actual.ready,
        "actual_capacity_rpm": actual.capacity_rpm, "actual_late": np.round(actual.late, 2),
        "warmcast_provisioned": wc.provisioned, "warmcast_ready": wc.ready, "warmcast_capacity_rpm": wc.capacity_rpm,
        "warmcast_late": np.round(wc.late, 2), "live_desired": mins.desired, "ttft_p99_s": mins.p99_s,
        "audit_id": list(mins.audit_ids)})


def write(rep: ShadowReport, out: Path, plot: bool = True) -> list[Path]:
    """report.json, minutes.csv and (unless ``plot`` is off) shadow.png under ``out``."""
    from workers.shadow_plot import plot_shadow

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "minutes.csv"]
    paths[0].write_text(json.dumps(rep.doc, indent=2, default=float))
    rep.minutes.to_csv(paths[1], index=False)
    if plot:
        paths.append(plot_shadow(rep.minutes, rep.doc, out / "shadow.png", rep.title))
    return paths


def summary(doc: dict[str, Any]) -> str:
    """The report in a few lines, as the CLI prints it."""
    a, w = doc["actual"], doc["warmcast"]
    c = doc["compared"]
    saved = doc["instance_hours_saved"]
    said = (f"warmcast would have saved {saved:g}" if saved > 0 else
            f"warmcast would have used {-saved:g} more" if saved < 0 else "the same")
    where = ([f"records of `warmcast run --simulate` (key prefix {doc['key_prefix']!r}): the settings' own prefix "
              "holds none in this window"] if doc.get("key_prefix", "").endswith(":sim") else [])
    return "\n".join([
        *where,
        f"{doc['deployment']}: {doc['minutes']} minutes compared ({c['first_minute']} .. {c['last_minute']} UTC), "
        f"{doc['requests']:,} requests",
        f"instance-hours: actual {a['instance_hours']}, warmcast {w['instance_hours']} ({said})",
        f"late requests (simulated, > {doc['late_wait_s']:g} s): actual {a['late_requests']:,}, "
        f"warmcast {w['late_requests']:,}",
        f"minutes the actual fleet was short and warmcast's would have covered: "
        f"{doc['short_actual_covered_by_warmcast']['minutes']}; the reverse: "
        f"{doc['short_warmcast_covered_by_actual']['minutes']}; both short: {doc['short_both']}",
        "limits:", *(f"- {x}" for x in doc["limits"])])
