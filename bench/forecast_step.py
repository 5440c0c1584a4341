"""The forecast step's cost per deployment-minute, with the history read from Redis every minute
(as before issue 44's rolling history: the baseline) and from the worker process's
:class:`warmcast.history.HistoryCache` (re-reads only the days a write touched), in one run.

N simulated deployments (``workers.simulate.seed_deployment``: eight days of per-minute history, as
``warmcast run --simulate`` and ``bench/scale.py`` seed them) on a fresh ``redis-server``.  Each
simulated minute appends one minute of load to every deployment (as the ingest step does), then
runs the workers' own forecast step (``workers.steps.forecast.step``) for each.  A first minute
warms both modes (models resolved and fitted for the hour, the cache filled); then ``--minutes``
minutes are measured per mode: CPU seconds of this process and of redis-server over deployments x
minutes, and the store days read per minute.  Each minute both modes forecast every deployment
(the baseline first) from the same data, and the report counts the stored forecasts that differ.

    .venv/bin/python bench/forecast_step.py                      # 200 deployments, 5 minutes per mode
    .venv/bin/python bench/forecast_step.py --deployments 20 --minutes 2 --doc none   # a smoke run
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import docsection  # noqa: E402
from loop import base_env, ctx_for, start_redis  # noqa: E402
from scale import deployments_file, seed  # noqa: E402


def append_minute(ctx, names: list[str], t: pd.Timestamp, i: int) -> None:
    for k, name in enumerate(names):
        one = pd.DataFrame({"requests": [float(50 + (k * 37 + i * 11) % 350)]}, index=pd.DatetimeIndex([t], name="time"))
        ctx.store.upsert_frame(name, one)


def run_minutes(ctx, names: list[str], start: pd.Timestamp, minutes: int, redis_proc) -> dict:
    """A warm-up minute, then ``minutes`` measured; each minute both modes forecast every deployment
    (the baseline first): CPU per deployment-minute, days read, and whether they stored the same."""
    import psutil

    from warmcast.history import HistoryCache
    from workers.steps import forecast

    rp = psutil.Process(redis_proc.pid)
    cache = HistoryCache(ctx.store)
    rows = {m: {"cpu": 0.0, "redis": 0.0} for m in MODES}
    differ, answered = 0, set()
    for m in range(minutes + 1):
        t = start + pd.Timedelta(minutes=m)
        append_minute(ctx, names, t, m)
        now = (t + pd.Timedelta(minutes=1)).tz_localize("UTC").to_pydatetime()
        got = {}
        for mode in MODES:
            c0, r0, d0 = time.process_time(), sum(rp.cpu_times()[:2]), cache.days_read
            for name in names:
                if mode == MODES[0]:
                    ctx.cache.pop("history", None)   # the baseline: every read goes to the store
                else:
                    ctx.cache["history"] = cache
                out = forecast.step(ctx, name, now=now)
                got[(mode, name)] = out.doc["quantiles"]["0.9"] if out.doc else None
                answered.add(out.model)
            if m:   # the warm-up minute fits the hour's models and fills the cache: not counted
                rows[mode]["cpu"] += time.process_time() - c0
                rows[mode]["redis"] += sum(rp.cpu_times()[:2]) - r0
                rows[mode]["days"] = rows[mode].get("days", 0) + cache.days_read - d0
        differ += sum(got[(MODES[0], n)] != got[(MODES[1], n)] for n in names)
    n = len(names) * minutes
    out = {mode: {"cpu_ms": 1000 * r["cpu"] / n, "redis_ms": 1000 * r["redis"] / n,
                  "days_read_per_min": r.get("days", 0) / minutes if mode == MODES[1] else None}
           for mode, r in rows.items()}
    return {"modes": out, "differ": differ, "answered": sorted(str(a) for a in answered)}


MODES = ("store every minute (baseline)", "process cache")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployments", type=int, default=200)
    ap.add_argument("--minutes", type=int, default=5, help="measured minutes per mode (after one warm-up)")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load0, command = os.getloadavg()[0], docsection.command_line()
    tmp = Path(tempfile.mkdtemp(prefix="wc-fcstep-"))
    redis_proc, url = start_redis(tmp / "redis")
    try:
        names = deployments_file(tmp / "deps.yaml", args.deployments)
        ctx = ctx_for(base_env(url, "fcstep", tmp, tmp / "deps.yaml", {}), simulate=True)
        now = time.time()
        seed(ctx, names)
        start = pd.Timestamp(int(now // 60) * 60, unit="s")
        res = run_minutes(ctx, names, start, args.minutes, redis_proc)
    finally:
        redis_proc.terminate()
    return report(res, args, load0, command)


def report(res: dict, args, load0: float, command: str) -> int:
    rows = res["modes"]
    base, ours = rows[MODES[0]], rows[MODES[1]]
    lines = [f"== the workers' forecast step, {args.deployments} simulated deployments (8 days per minute each), "
             f"{args.minutes} measured minutes per mode ==",
             f"{'mode':<32} {'CPU ms/dep-min':>14} {'redis ms/dep-min':>16} {'days read/min':>13}"]
    for label, r in rows.items():
        days = "every day" if r["days_read_per_min"] is None else f"{r['days_read_per_min']:.0f}"
        lines.append(f"{label:<32} {r['cpu_ms']:>14.2f} {r['redis_ms']:>16.2f} {days:>13}")
    total = lambda r: r["cpu_ms"] + r["redis_ms"]  # noqa: E731
    lines.append(f"process cache / baseline, worker + redis CPU per deployment-minute: {total(ours) / total(base):.2f}x "
                 f"({total(ours):.2f} vs {total(base):.2f} ms); load average {load0:.2f} when the run began, "
                 f"{os.getloadavg()[0]:.2f} at its end")
    lines.append(f"forecasts stored that differ between the modes: {res['differ']} of "
                 f"{args.deployments * (args.minutes + 1)}; models that answered: {', '.join(res['answered'])}")
    lines.append("The forecast step only (issue 44's whole-loop target is bench:scale's); not a verdict on it.")
    text = "```\n" + "\n".join(lines) + "\n```\n"
    print(text)
    docsection.publish(args.doc, "forecast_step", docsection.provenance(load0, command) + "\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
