"""Chaos run (issue 10): faults against a real Redis, worker, beat and API, and a table of how
each was survived: fault, recovered within one tick of its cause (yes/no), seconds to recover, data
lost, double actions.

Loopback only, bounded in time (every wait has a deadline; about 5 minutes on 2 shared cores).
It starts its own redis-server on a free port (the Redis fault restarts that one, never the
shared server on 6379), a worker, beat and `warmcast api serve --grpc-port` on a simulated
fleet, under a fresh key prefix, and stops all of them at the end.

    .venv/bin/python bench/chaos.py

Faults, in order:
- worker kill -9 between apply and audit (the fault-injection pause), a second worker standing by
- Redis restart (SIGTERM, append-only file, same port)
- Redis restart EMPTY (kill -9, a fresh data directory) and a Sentinel failover of a second loop
  on ``sentinel://`` URLs (bench/chaos_redis.py)
- a second beat for 15 s
- bad ingest rows: a 2200-dated row (CLI and the observations route), two rows a year apart
- an access log rotated under `ingest --follow` (copytruncate, truncate-and-regrow, rename), an
  observation POSTed at now+2 h, two first ingests at different resolutions racing (bench/chaos_ingest.py)
- hostile API requests: a far-future capacity query, NaN in a JSON body
- a truncated parquet and a CSV named .parquet ingested into the deployment that holds load
- the gRPC external scaler asked after 10 s idle
- more open StreamIsActive streams than the scaler has threads, then one unary IsActive
- 1,000 forecast requests (50 concurrent) for a deployment with no stored forecast
- SIGTERM to the API while a request waits on a cold forecast computation (then it starts again)
A row that does not recover says so; nothing is hidden.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ itself must not be on the path: bench/api.py would hide the api package.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

from bench import chaos_ingest, chaos_redis, chaos_round3, chaosapi, docsection  # noqa: E402
from bench.chaosrig import Rig, Row  # noqa: E402
from warmcast.runtime import wait_until  # noqa: E402

PLAN_EVERY_S = 5.0
LEASE_S = 2.0


def fault_worker_kill(rig: Rig) -> Row:
    """Kill -9 the worker sleeping between apply and audit; the spare worker carries on."""
    first = wait_until(lambda: rig.actions(), 90)
    if not first:
        return Row("worker kill -9 between apply and audit", False, None, "-", "-", "no first action to interrupt")
    killed_tick = first[0]["tick"]
    spare = rig.worker("spare")
    wait_until(lambda: "ready" in spare.log.read_text(), 90)
    bound, bound_note = rig.tick_bound()
    marks = rig.log_marks()
    rig.kill("faulty")
    t_kill = time.time()
    newer = wait_until(lambda: [r for r in rig.plan_audits() if r["inputs"]["tick"] > killed_tick], 60)
    seconds = min(rig.audit_time(r) for r in newer) - t_kill if newer else None
    time.sleep(rig.visibility_s + 2)  # the killed run's message comes back after the visibility timeout
    audited = [r for r in rig.plan_audits() if r["inputs"]["tick"] == killed_tick]
    lost = "0" if audited else "1 decision unaudited"
    note = f"plan every {PLAN_EVERY_S:g} s, lease {LEASE_S:g} s; killed tick: {audited[0]['outcome'] if audited else '?'}"
    return Row("worker kill -9 between apply and audit", bool(newer), seconds, lost, str(rig.double_actions()), note,
               tracebacks=str(rig.tracebacks_since(marks)), bound_s=bound, bound_note=bound_note)


def fault_redis_restart(rig: Rig) -> Row:
    before = rig.stored_minutes()
    bound, bound_note = rig.tick_bound()
    marks = rig.log_marks()
    rig.restart_redis()
    t_up = time.time()
    seconds = rig.plan_after(t_up, 90)
    after = rig.stored_minutes(until=before[1])
    lost = before[0] - after[0]
    alive = rig.dead() == []
    return Row("Redis restart (SIGTERM, AOF, same port)", seconds is not None and alive and lost == 0, seconds,
               f"{lost} stored minutes", str(rig.double_actions()),
               "counted from Redis answering again; " + ("all processes alive" if alive else f"exited: {rig.dead()}"),
               tracebacks=str(rig.tracebacks_since(marks)), bound_s=bound, bound_note=bound_note)


def fault_second_beat(rig: Rig) -> Row:
    t0, marks = time.time(), rig.log_marks()
    rig.beat("beat-2")
    time.sleep(15)
    sent_twice, ran_twice = rig.fanouts_twice(t0, "sent"), rig.fanouts_twice(t0, "runs")
    rig.kill("beat-2")
    fired, double = rig.fanouts_since(t0), rig.double_actions()
    return Row("second beat for 15 s", not sent_twice and double == 0 and fired > 0, None, "0",
               f"{len(sent_twice)} slots sent twice, {double} actions",
               f"{fired} slots fanned out in the window; a second run refused by the slot claim: {ran_twice[:3]}",
               tracebacks=str(rig.tracebacks_since(marks)))


def fault_ingest_2200(rig: Rig) -> Row:
    before = rig.stored_minutes()
    csv = rig.tmp / "bad-2200.csv"
    now = int(time.time() // 60) * 60
    rows = [f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now - 600 + 60 * i))},10" for i in range(3)]
    csv.write_text("time,requests\n" + "\n".join(rows + ["2200-01-01T00:00:00Z,10"]) + "\n")
    t0 = time.monotonic()
    rc, out = rig.cli(["ingest", str(csv), "-d", rig.dep, "--format", "counts"], timeout_s=120)
    cli_s = time.monotonic() - t0
    status, _ = rig.post_observations([{"time": "2200-01-01T00:00:00Z", "requests": 1.0}])
    rig.run_expire()  # retention runs; it must not count back from a refused row
    after = rig.stored_minutes(until=before[1])
    lost = before[0] - after[0]
    ok = rc is not None and lost <= 0 and status < 500
    said = out.strip().splitlines()[-1][:90] if out.strip() else ""
    return Row("ingest: a row dated 2200 (CLI, then POST observations)", ok, None, f"{max(lost, 0)} stored minutes",
               "-", f"refused at the door (CLI {cli_s:.1f} s); CLI exit {rc}: {said}; POST -> {status}",
               n5xx=str(int(status >= 500)), tracebacks=str(out.count("Traceback")))


def fault_ingest_span(rig: Rig) -> Row:
    log = rig.tmp / "outlier-span.csv"
    log.write_text("timestamp,input_tokens,output_tokens\n2024-01-01T00:00:00Z,10,10\n2025-01-01T00:00:00Z,10,10\n")
    t0 = time.monotonic()
    rc, out = rig.cli(["ingest", str(log), "-d", "chaos-span", "--format", "warmcast"], timeout_s=120, rss=True)
    seconds = time.monotonic() - t0
    stored = rig.stored_minutes("chaos-span")[0]
    ok = rc is not None and seconds < 30 and stored < 10_000
    return Row("ingest: two rows a year apart", ok, None, "0", "-",
               f"CLI {seconds:.1f} s (bound 30 s), exit {rc}, peak RSS {out}, {stored:,} minutes stored")


def fault_ingest_bad_parquet(rig: Rig) -> Row:
    """A parquet cut in half, and a CSV named .parquet (finding 8): an error naming the file,
    no traceback, and nothing already stored is lost."""
    import pandas as pd

    before = rig.stored_minutes()
    cut = rig.tmp / "cut.parquet"
    start = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("min") - pd.Timedelta(minutes=30)
    pd.DataFrame({"timestamp": pd.date_range(start, periods=500, freq="s"), "input_tokens": 5,
                  "output_tokens": 1}).to_parquet(cut)
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    fake = rig.tmp / "csv.parquet"
    fake.write_text(f"timestamp,input_tokens,output_tokens\n{start:%Y-%m-%dT%H:%M:%SZ},5,1\n")
    t0 = time.monotonic()
    results = [rig.cli(["ingest", str(f), "-d", rig.dep], timeout_s=120) for f in (cut, fake)]
    seconds = time.monotonic() - t0
    after = rig.stored_minutes(until=before[1])
    lost = before[0] - after[0]
    clean = all(rc == 2 and "Traceback" not in out for rc, out in results)
    last = [out.strip().splitlines()[-1].replace(f"{rig.tmp}/", "")[:90] if out.strip() else ""
            for _, out in results]
    return Row("ingest: a truncated parquet, a CSV named .parquet", clean and lost <= 0, None,
               f"{max(lost, 0)} stored minutes", "-", f"refused at the door (both CLIs {seconds:.1f} s); "
               + "; ".join(f"CLI exit {rc}: {msg}" for (rc, _), msg in zip(results, last))
               + f"; {rig.dep} held {before[0]:,} minutes before",
               tracebacks=str(sum(out.count("Traceback") for _, out in results)))


def fault_hostile_api(rig: Rig) -> Row:
    t0 = time.monotonic()
    far = rig.api_get(f"/v1/deployments/{rig.dep}/capacity?start=9999-01-01T00:00:00Z", timeout_s=30)
    far_s = time.monotonic() - t0
    nan_status, _ = rig.post_raw(f"/v1/deployments/{rig.dep}/observations",
                                 '{"observations": [{"time": "2026-01-01T00:00:00Z", "requests": NaN}]}')
    t1 = time.monotonic()
    healthy = rig.api_get("/healthz", timeout_s=5) == 200
    ok = far is not None and far < 500 and nan_status < 500 and healthy
    return Row("API: far-future capacity query, NaN in a JSON body", ok, None, "0", "-",
               f"capacity -> {far_s:.2f} s, {far if far is not None else 'no answer in 30 s'}, NaN body -> {nan_status}, "
               f"/healthz after: {'ok' if healthy else 'no'} ({time.monotonic() - t1:.2f} s)",
               n5xx=str(sum(1 for c in (far, nan_status) if c is not None and c >= 500)))


def fault_grpc_idle(rig: Rig) -> Row:
    idle = max(0.0, 10.0 - (time.monotonic() - rig.api_started))
    time.sleep(idle)
    t0 = time.monotonic()
    answer = rig.grpc_is_active()
    return Row("gRPC external scaler asked after >= 10 s idle", not answer.startswith("error"), None,
               "0", "-",
               f"IsActive -> {answer} in {time.monotonic() - t0:.2f} s ({time.monotonic() - rig.api_started:.0f} s after start)")


# The API faults come last: the SIGTERM one restarts the API, and the idle gRPC row counts from its start.
FAULTS = (fault_worker_kill, fault_redis_restart, *chaos_redis.FAULTS, fault_second_beat, fault_ingest_2200,
          fault_ingest_span, fault_ingest_bad_parquet, *chaos_ingest.FAULTS, fault_hostile_api, fault_grpc_idle,
          *chaosapi.FAULTS)


def run_rows(rig: Rig, faults) -> list[Row]:
    rows: list[Row] = []
    for fault in faults:
        t0 = time.monotonic()
        try:
            row = fault(rig)
        except Exception as err:  # noqa: BLE001 - a fault that breaks the run is a row, not a crash
            row = Row(fault.__name__, False, None, "?", "?", f"chaos run error: {type(err).__name__}: {err}")
        print(f"  {row.fault}: {'recovered' if row.ok else 'NOT recovered in time' if row.recovered else 'NOT recovered'} "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (logs) and print its path")
    ap.add_argument("--only", default="", help="comma-separated fault functions to run (default: all), "
                    "e.g. fault_cold_burst; the first fault's paused worker is then left paused")
    ap.add_argument("--set", choices=("all", "round2", "round3"), default="all", dest="which",
                    help="round2: the fast loop's rows (section chaos); round3: the minute loop's rows of issue 41 "
                    "(section chaos_round3, about 70 min with the hour at load 8); all: both")
    ap.add_argument("--hour-minutes", type=float, default=60.0, help="length of round three's load-8 row")
    ap.add_argument("--burner-nice", type=int, default=0, help="nice level of the load-8 row's busy processes "
                    "(the row names it when not 0)")
    docsection.add_doc_option(ap)
    args = ap.parse_args(argv)
    load, command = os.getloadavg()[0], docsection.command_line()
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    ok = True
    if args.which in ("all", "round2"):
        faults = [f for f in FAULTS if not args.only or f.__name__ in args.only.split(",")]
        with Rig(plan_every_s=PLAN_EVERY_S, lease_s=LEASE_S, keep=args.keep) as rig:
            print(f"chaos: redis-server on 127.0.0.1:{rig.redis_port}, prefix {rig.prefix}, logs in {rig.tmp}",
                  flush=True)
            rig.start(faulty_worker_pause_s=600)
            rows = run_rows(rig, faults)
        print()
        with docsection.printed_into("none" if args.only else args.doc, "chaos", load, command):
            print(Row.table(rows))
        ok = ok and all(r.ok for r in rows)
    if args.which in ("all", "round3"):
        load3 = os.getloadavg()[0]
        faults = [f for f in chaos_round3.faults(args.hour_minutes, args.burner_nice)
                  if not args.only or f.__name__ in args.only.split(",")]
        with chaos_round3.minute_rig(args.keep) as rig:
            print(f"chaos round 3: the minute loop on 127.0.0.1:{rig.redis_port}, prefix {rig.prefix}, logs in {rig.tmp}",
                  flush=True)
            chaos_round3.start(rig)
            rows = run_rows(rig, faults)
        print()
        with docsection.printed_into("none" if args.only else args.doc, "chaos_round3", load3, command):
            print(Row.table(rows))
        ok = ok and all(r.ok for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
