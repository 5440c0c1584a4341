"""Helpers: real Celery worker and beat processes against a real Redis, for the workers' tests.

Each test gets its own key prefix (Celery's queues, RedBeat's schedule and lock,
and warmcast's state all live under it), so tests share the Redis at
127.0.0.1:6379 with everyone else; processes are killed and keys deleted in teardown.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from warmcast.runtime import free_loopback_port as free_port  # noqa: F401 - the tests import it from here
from warmcast.runtime import wait_until

from clienv import cli_env  # noqa: F401 - the tests import it from here

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
# The marks of a test module that runs real vLLM CPU servers.
NEEDS_VLLM = [pytest.mark.integration,
              pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}: "
                                 "run scripts/setup-vllm.sh to create it")]
PY = sys.executable

SIM_DEPLOYMENTS = """
deployments:
  - name: simdep
    cold_start_min: {cold}
    min_replicas: 1
    max_replicas: 10
    profiles:
      day: {{capacity_rpm: 100}}
"""

FAST = {  # a minute's loop in seconds
    "WARMCAST_WORKERS_SCRAPE_EVERY_S": "1",
    "WARMCAST_WORKERS_INGEST_EVERY_S": "2", "WARMCAST_WORKERS_FORECAST_EVERY_S": "2",
    "WARMCAST_WORKERS_PLAN_EVERY_S": "2",
    "WARMCAST_WORKERS_EXPIRE_EVERY_S": "30", "WARMCAST_WORKERS_BEAT_LOOP_S": "0.25",
    "WARMCAST_WORKERS_LEASE_S": "2", "WARMCAST_WORKERS_VISIBILITY_TIMEOUT_S": "6",
}


def vllm_deployments(port: int, capacity_rpm: float, extra: str = "") -> str:
    """A deployments file: one deployment ``vdep`` of real vLLM CPU servers (dummy model, one
    sequence at a time) from ``port`` up; ``extra`` adds keys (YAML lines, 4-space indent)."""
    return f"""
deployments:
  - name: vdep
    model: dummy
    min_replicas: 1
    max_replicas: 2
    scaler: {{kind: local, python: {VLLM_PY}, base_port: {port}}}
{extra}    profiles:
      day: {{capacity_rpm: {capacity_rpm:g}, engine_args: {{max-num-seqs: 1}}}}
"""




class Loop:
    """Start/stop worker and beat subprocesses sharing one environment."""

    def __init__(self, tmp: Path, redis_url: str, prefix: str, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.prefix = prefix
        self.redis_url = redis_url
        self.env = {**os.environ, "WARMCAST_REDIS_URL": redis_url, "WARMCAST_KEY_PREFIX": prefix,
                    "WARMCAST_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(ROOT),
                    "WARMCAST_LOG_LEVEL": "INFO", **FAST, **env}
        self.procs: list[subprocess.Popen] = []
        self.n = 0

    def _start(self, args: list[str], name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        self.n += 1
        log = open(self.tmp / f"{name}-{self.n}.log", "w")
        p = subprocess.Popen([PY, "-m", "celery", "-A", "workers.app:celery_app", *args], cwd=ROOT,
                             env={**self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        p.log_path = self.tmp / f"{name}-{self.n}.log"  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def worker(self, extra_env: dict[str, str] | None = None, concurrency: int = 4) -> subprocess.Popen:
        self.n += 0
        return self._start(["worker", "--pool", "threads", "-c", str(concurrency), "-Q", "warmcast",
                            "--without-gossip", "--without-mingle", "--without-heartbeat",
                            "-n", f"w{self.n + 1}-{self.prefix}@%h"], "worker", extra_env)

    def beat(self) -> subprocess.Popen:
        return self._start(["beat", "-s", str(self.tmp / f"beat-{self.n}.db")], "beat")

    @staticmethod
    def kill(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)

    def stop_all(self) -> None:
        for p in self.procs:
            self.kill(p, signal.SIGTERM if p.poll() is None else signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n" + p.log_path.read_text()[-3000:] for p in self.procs)


def wait_for(cond: Callable[[], object], timeout: float, what: str, loop: Loop | None = None, poll: float = 0.2):
    v = wait_until(cond, timeout, poll)
    if v:
        return v
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" +
                         (f"\n{loop.logs()}" if loop else ""))




def ctx_for(loop: Loop):
    """An in-test context on the same settings as the loop's processes (to seed and to read state)."""
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions

    env = loop.env
    settings = load_settings(redis_url=env["WARMCAST_REDIS_URL"], key_prefix=env["WARMCAST_KEY_PREFIX"],
                             deployments_file=env["WARMCAST_DEPLOYMENTS_FILE"], state_dir=env["WARMCAST_STATE_DIR"])
    opts = WorkerOptions(simulate=env.get("WARMCAST_WORKERS_SIMULATE") == "1")
    # The client the worker itself uses (sentinel:// too, 30 s reads): redis-py's default 5 s read
    # timeout failed a CI run where two vLLM engines starved this process beside Redis.
    return Ctx(settings, opts)


def seed_steady(ctx, dep: str, rpm: float) -> int:
    """A simulated deployment with stored history and a steady ``rpm`` around now, one replica up;
    returns the minute (Unix minutes) the traffic was laid around."""
    import time

    import pandas as pd

    from workers.simulate import seed_deployment

    seed_deployment(ctx, dep, mean_rpm=80)
    now_min = int(time.time() // 60)
    idx = pd.to_datetime([(now_min + k) * 60 for k in range(-2, 5)], unit="s")
    ctx.sim(dep).load_traffic(pd.Series(rpm, index=idx))
    ctx.sim(dep).reset(1)
    return now_min


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``warmcast ARGS`` as a user runs it, in ``env`` (see :func:`cli_env`)."""
    return subprocess.run([sys.executable, "-m", "warmcast.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600)


