"""Chaos, round three (issue 41): the loop at its production intervals (a plan tick each minute, a
scrape every 10 s) on its own redis-server, a worker and beat on a simulated fleet, and the faults
that broke it: a beat tick stalled 12 s and 60 s (past the schedule lock's 10 s), Redis frozen by
``DEBUG SLEEP 15``, irregular count series, a switch rolled back at min = max, and an hour at load 8.
Each row says whether the loop recovered within one tick of the cause, the plan ticks lost (whole
minutes with no audited tick of the deployment), data inflated, double actions and tracebacks.

Run by bench/chaos.py (``--set round3`` runs these rows alone); loopback only, every wait bounded.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import redis

from bench.chaosrig import PY, Rig, Row
from warmcast.runtime import wait_until

MINUTE_LOOP = {"WARMCAST_WORKERS_PLAN_EVERY_S": "60", "WARMCAST_WORKERS_SCRAPE_EVERY_S": "10",
               "WARMCAST_WORKERS_FORECAST_EVERY_S": "60", "WARMCAST_WORKERS_INGEST_EVERY_S": "60",
               "WARMCAST_WORKERS_BEAT_LOOP_S": "1", "WARMCAST_WORKERS_LEASE_S": "10",
               "WARMCAST_WORKERS_VISIBILITY_TIMEOUT_S": "300",
               "WARMCAST_WORKERS_FAULT_BEAT_STALL": "1"}
SLOT = "%Y-%m-%dT%H:%M:%S"


def minute_rig(keep: bool) -> Rig:
    return Rig(plan_every_s=60.0, lease_s=10.0, keep=keep, env=MINUTE_LOOP)


def start(rig: Rig) -> None:
    """Redis, a simulated fleet with a week of history, one worker and one beat."""
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions
    from workers.simulate import seed_deployment

    rig.start_redis()
    settings = load_settings(redis_url=rig.url, key_prefix=rig.prefix, state_dir=rig.tmp / "state",
                             deployments_file=rig.tmp / "deployments.yaml")
    rig.ctx = Ctx(settings, WorkerOptions(simulate=True), redis.Redis.from_url(rig.url))
    seed_deployment(rig.ctx, rig.dep, mean_rpm=80)
    rig.worker("worker")
    rig.beat("beat")
    wait_until(lambda: rig.plan_audits(), 150)


# ------------------------------------------------------------------ what the rows count
def ticked(rig: Rig) -> set[str]:
    return {r["inputs"]["tick"] for r in rig.plan_audits() if r["inputs"].get("tick")}


def whole_minutes(t0: float, t1: float) -> list[str]:
    """The minutes that begin at or after ``t0`` and end by ``t1``, as tick slots."""
    m = (int(t0) // 60 + (t0 % 60 > 0)) * 60
    out = []
    while m + 60 <= t1:
        out.append(datetime.fromtimestamp(m, timezone.utc).strftime(SLOT))
        m += 60
    return out


def lost_ticks(rig: Rig, t0: float, t1: float) -> list[str]:
    have = ticked(rig)
    return [m for m in whole_minutes(t0, t1) if m not in have]


def skipped_plan_slots(rig: Rig) -> list[str]:
    """The plan slots no fan-out served (workers.fanout's ledger)."""
    return [k.decode() for key in rig.ctx.r.scan_iter(f"{rig.prefix}:fanout-skipped:*")
            for k in rig.ctx.r.hgetall(key) if k.startswith(b"plan|")]


def tick_delays(rig: Rig, minutes: list[str]) -> list[float]:
    """Seconds from each minute's start to its tick's audit entry."""
    start = {m: datetime.strptime(m, SLOT).replace(tzinfo=timezone.utc).timestamp() for m in minutes}
    return sorted(rig.audit_time(r) - start[r["inputs"]["tick"]] for r in rig.plan_audits()
                  if r["inputs"].get("tick") in start)


def wait_second(at: float) -> None:
    """Sleep until second ``at`` of a minute, so a fault spans the next minute's boundary."""
    time.sleep((at - time.time() % 60) % 60)


# ------------------------------------------------------------------ the rows
def _fault_window(rig: Rig, label: str, fault_s: float, begin) -> Row:
    """Start a fault ``fault_s`` long 10 s before a minute's boundary; count from the minute before it
    to a whole minute after it ended."""
    bound, bound_note = rig.tick_bound()
    marks = rig.log_marks()
    wait_second(50)
    t0 = time.time()
    begin()
    t_end = t0 + fault_s
    time.sleep(max(0.0, t_end - time.time()) + 0.5)   # the rig's own reads wait out a frozen Redis
    seconds = rig.plan_after(t_end, 150)
    wait_until(lambda: time.time() > t_end + 75, 200)
    lost = lost_ticks(rig, t0 - 60, time.time() - 15)
    alive = rig.dead() == []
    return Row(label, seconds is not None and alive and not lost, seconds, f"{len(lost)} plan ticks",
               str(rig.double_actions()), ("all processes alive" if alive else f"exited: {rig.dead()}")
               + (f"; minutes without a tick: {lost}" if lost else ""),
               tracebacks=str(rig.tracebacks_since(marks)), bound_s=bound, bound_note=bound_note)


def fault_beat_stall(seconds: float):
    def fault(rig: Rig) -> Row:
        def begin() -> None:
            rig.ctx.r.set(f"{rig.prefix}:fault:beat-stall", str(seconds))
            wait_until(lambda: not rig.ctx.r.exists(f"{rig.prefix}:fault:beat-stall"), 10)

        return _fault_window(rig, f"beat tick stalled {seconds:g} s (lock timeout 10 s)", seconds, begin)

    fault.__name__ = f"fault_beat_stall_{seconds:g}s"
    return fault


def fault_redis_debug_sleep(rig: Rig) -> Row:
    def begin() -> None:
        client = redis.Redis.from_url(rig.url, socket_timeout=None)
        threading.Thread(target=client.execute_command, args=("DEBUG", "SLEEP", "15"), daemon=True).start()

    return _fault_window(rig, "Redis frozen: DEBUG SLEEP 15", 15.0, begin)


def _series_csv(path, step_min: int, n: int, odd: int, odd_shift_min: int, per_bin: float) -> float:
    """A count series every ``step_min`` minutes whose stamp ``odd`` is ``odd_shift_min`` late; its true
    rate per minute."""
    t0 = datetime(2026, 1, 5, tzinfo=timezone.utc)
    rows = [(t0 + timedelta(minutes=step_min * i + (odd_shift_min if i == odd else 0))).strftime("%Y-%m-%dT%H:%M:%SZ")
            for i in range(n)]
    path.write_text("time,requests\n" + "".join(f"{r},{per_bin:g}\n" for r in rows))
    return per_bin / step_min


def fault_irregular_series(rig: Rig) -> Row:
    """The two series of finding 2: 5-minute bins with one stamp a minute late (was stored 5x too high),
    7-minute bins with one 6-minute step (7x).  Refused with the rows named, or stored at the true rate."""
    from warmcast.resolution import resolution_of

    said, inflated, tracebacks = [], 0, 0
    for name, step, odd_shift in (("irregular-5", 5, 1), ("irregular-7", 7, -1)):
        path = rig.tmp / f"{name}.csv"
        true_rpm = _series_csv(path, step, 2016, 700, odd_shift, 990.0)
        rc, out = rig.cli(["ingest", str(path), "-d", name, "--format", "counts"], timeout_s=180)
        tracebacks += out.count("Traceback")
        if rc == 0:
            frame = rig.ctx.store.frame(name)
            rate = float(frame["requests"].mean()) / resolution_of(frame)
            inflated += rate > 1.05 * true_rpm
            said.append(f"{name}: stored at {rate:,.1f}/min (true {true_rpm:,.1f})")
        else:
            said.append(f"{name}: exit {rc}: {out.strip().splitlines()[-1][:120] if out.strip() else ''}")
    ok = inflated == 0 and tracebacks == 0
    return Row("irregular count series (5 min, one stamp 1 min late; 7 min, one 6-min step)", ok, None,
               f"{inflated} series inflated", "-", "; ".join(said), tracebacks=str(tracebacks))


def fault_rollback_min_max(rig: Rig) -> Row:  # noqa: ARG001 - the decision core alone, no process
    """A day/night switch at min = max = 3 whose canary's P99 breaks the breaker: every minute's split
    is checked against the floor (the fleet went to 2 in the rollback before the fix)."""
    from warmup.core import ForecastInput, Instance, InstanceState, TickInput, decide
    from warmup.core.adapters import core_config_from_values
    from warmup.core.state import SwitchPhase

    values = {"min_replicas": 3, "max_replicas": 3, "default_profile": "day", "cold_start_min": 3.0,
              "profiles": {"day": {"capacity_rpm": 200.0}, "night": {"capacity_rpm": 100.0}},
              "schedule": {"windows": [{"profile": "night", "start": "22:00", "end": "06:00"}]}}
    cfg = core_config_from_values(values, timezone.utc, switch={"prewarm_min": 10.0, "hold_min": 0.0,
                                                                "settle_min": 3.0, "max_prewarm_wait_min": 20.0})
    state, pools, fewest, phases = None, {"day": 3, "night": 0}, 3, []
    t0 = datetime(2024, 5, 14, 21, 0, tzinfo=timezone.utc)
    for minute in range(120):
        now = t0 + timedelta(minutes=minute)
        insts = tuple(Instance(f"{p}{i}", InstanceState.READY_BUSY, profile=p) for p, k in pools.items() for i in range(k))
        phase = state.switch.phase if state else SwitchPhase.STEADY
        p99 = 3.0 if phase in (SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.SETTLE) else 1.0
        fc = ForecastInput(now, (0.5, 0.9), ((300.0,) * 30, (330.0,) * 30))
        out = decide(cfg, TickInput(now, insts, 300.0, forecast=fc, p99_latency_s=p99), state)
        state = out.state
        phases.append(state.switch.phase.value)
        if out.switch.replicas:
            pools = {p: dict(out.switch.replicas).get(p, 0) for p in pools}
        fewest = min(fewest, sum(pools.values()))
    rolled = "rollback" in phases
    return Row("switch rolled back at min = max = 3 (decision core, 120 minutes)", rolled and fewest >= 3, None,
               f"fewest replicas {fewest}", "-", f"phases seen: {sorted(set(phases))}" +
               ("" if rolled else "; the breaker never rolled back: the row proves nothing"))


def fault_load_hour(minutes: float, nice: int = 0):
    def fault(rig: Rig) -> Row:
        """Eight busy processes beside the loop for ``minutes`` (at ``nice``); every minute must have its tick."""
        import os

        marks, burners = rig.log_marks(), []
        burners = [subprocess.Popen(["nice", "-n", str(nice), PY, "-c", "while True: pass"]) for _ in range(8)]
        loads, t0 = [], time.time()
        try:
            while time.time() < t0 + 60 * minutes:
                time.sleep(min(30.0, max(0.0, t0 + 60 * minutes - time.time())))
                loads.append(os.getloadavg()[0])
                if rig.dead():
                    break
        finally:
            for b in burners:
                b.kill()
                b.wait()
        t1 = time.time()
        wait_until(lambda: time.time() > t1 + 30, 60)
        minutes_in = whole_minutes(t0, t1)
        lost = lost_ticks(rig, t0, t1)
        delays = tick_delays(rig, minutes_in)
        p99 = delays[min(len(delays) - 1, int(0.99 * len(delays)))] if delays else None
        skipped = len(skipped_plan_slots(rig))
        alive = rig.dead() == []
        return Row(f"{minutes:g} min at load 8 (8 busy processes{f' at nice {nice}' if nice else ''} on "
                   f"{os.cpu_count()} cores)",
                   alive and not lost, None, f"{len(lost)} of {len(minutes_in)} minutes without a tick",
                   str(rig.double_actions()),
                   f"load average (1 min) mean {sum(loads) / max(len(loads), 1):.1f}, max {max(loads, default=0):.1f}; "
                   f"tick audited {delays[0] if delays else float('nan'):.1f}-{delays[-1] if delays else float('nan'):.1f} s "
                   f"after its minute began (P99 {p99 if p99 is not None else float('nan'):.1f} s); plan slots skipped "
                   f"in the whole run: {skipped}; " + ("all processes alive" if alive else f"exited: {rig.dead()}"),
                   tracebacks=str(rig.tracebacks_since(marks)))

    fault.__name__ = "fault_load_hour"
    return fault


def faults(hour_minutes: float, nice: int = 0) -> tuple:
    return (fault_beat_stall(12), fault_beat_stall(60), fault_redis_debug_sleep, fault_irregular_series,
            fault_rollback_min_max, fault_load_hour(hour_minutes, nice))


if __name__ == "__main__":
    sys.exit("run bench/chaos.py --set round3")
