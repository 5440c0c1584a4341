"""Tail latency of the forecast route, and throughput of the hot routes, vs a bare FastAPI route, same run.

Starts two uvicorn servers on loopback (same uvicorn options): warmcast's API, and a
bare FastAPI app whose one route returns a constant JSON object.  In Redis (real, the
way the workers store things) deployment ``demo`` has a stored forecast and deployment
``cold`` has load but no stored forecast (the API computes it once, single flight, and
reuses it).  Drives each route with ``wrk`` (50 connections, closed loop), rotating the
order of the routes each round because the machine is shared and noisy, and prints
requests/s and p50/p99 latency, and each forecast route's p99 over the bare route's p99
in the same run (target <= 1.3x, both with a stored forecast and with none).  The routes
that probes, scrapes and autoscalers poll (``/healthz``, ``/readyz``, ``/metrics``,
``/v1/keda/demo``) are driven in the same rounds; each must serve at least as many
requests/s as the stored forecast (target >= 1.0x).

Every route is driven for one second right before each measured run: the hot routes reuse
an answer rendered at most once a second (KEDA's every 5 s), so this measures them in their
steady state, not the one render after an idle gap that the first pollers wait for.

    .venv/bin/python bench/api.py [--connections 50] [--duration 10] [--rounds 3] [--workers 1]
        [--routes bare,stored,none,healthz,readyz,metrics,keda]

Needs ``wrk`` (Debian package ``wrk``) and Redis (WARMCAST_TEST_REDIS_URL or
redis://127.0.0.1:6379/0); its keys live under a unique prefix, deleted at the end.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import docsection  # noqa: E402

from warmcast.runtime import free_loopback_port as free_port  # noqa: E402

BARE_APP = '''
from fastapi import FastAPI

def create_bare():
    app = FastAPI()

    @app.get("/bare")
    async def bare():
        return {"ok": True}

    return app
'''




def wait_up(url: str, proc: subprocess.Popen, timeout: float = 900) -> None:
    """Wait for a 200 (the cold deployment's first forecast is a fit: minutes on a busy machine)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def seed(redis_url: str, prefix: str) -> None:
    import numpy as np
    import pandas as pd
    import redis

    from warmcast.forecast import Forecast
    from warmcast.state import StateStore
    from warmcast.store import LoadStore

    r = redis.Redis.from_url(redis_url)
    idx = pd.date_range("2024-01-01", periods=2 * 1440, freq="min")
    LoadStore(r, prefix).upsert_frame("demo", pd.DataFrame({"requests": np.full(len(idx), 300.0)}, index=idx))
    path = np.linspace(300, 450, 30)
    fc = Forecast(idx[-1] + pd.Timedelta(minutes=1), path, {0.1: path * 0.8, 0.5: path, 0.9: path * 1.2},
                  model="lstm", version="demo/v0001")
    StateStore(r, prefix).put_forecast("demo", fc, trained_at="2024-01-02 23:00:00")
    rng = np.random.default_rng(0)  # "cold": load only, no stored forecast
    LoadStore(r, prefix).upsert_frame("cold", pd.DataFrame({"requests": rng.poisson(300, len(idx)).astype(float)},
                                                           index=idx))


def cleanup(redis_url: str, prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    keys = list(r.scan_iter(f"{prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        r.delete(*keys[i:i + 500])


def parse_wrk(out: str) -> dict[str, float]:
    def ms(text: str) -> float:
        v, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
        return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(1) if errors else ""}


def run_wrk(url: str, connections: int, duration: int, threads: int) -> dict[str, float]:
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    return parse_wrk(out)


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (route order rotated); medians are reported")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes for BOTH servers")
    ap.add_argument("--threads", type=int, default=1, help="wrk threads")
    ap.add_argument("--routes", default=",".join(LABELS), help="comma-separated routes (bare and stored always)")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    load, command = os.getloadavg()[0], docsection.command_line()
    names = [n for n in args.routes.split(",") if n]
    if set(names) - set(LABELS) or not {"bare", "stored"} <= set(names):
        raise SystemExit(f"--routes: bare and stored are needed; known: {','.join(LABELS)}")
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install -y wrk")
    redis_url = os.environ.get("WARMCAST_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"wcbench-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="wcbench-"))
    (tmp / "bare_app.py").write_text(BARE_APP)
    seed(redis_url, prefix)
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_url, "WARMCAST_KEY_PREFIX": prefix,
           "WARMCAST_STATE_DIR": str(tmp / "state"), "PYTHONPATH": f"{ROOT}:{tmp}"}
    env.pop("WARMCAST_API_READ_TOKEN", None)
    uv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning", "--no-access-log",
          "--workers", str(args.workers)]
    p_api, p_bare = free_port(), free_port()
    procs = [start(uv + ["--port", str(p_api), "--factory", "api.app:create_app"], env, tmp / "api.log"),
             start(uv + ["--port", str(p_bare), "--factory", "bare_app:create_bare"], env, tmp / "bare.log")]
    base = f"http://127.0.0.1:{p_api}/v1/deployments"
    query = "forecast?horizon=30&quantiles=0.1,0.5,0.9"
    api = f"http://127.0.0.1:{p_api}"
    urls = {"bare": f"http://127.0.0.1:{p_bare}/bare", "stored": f"{base}/demo/{query}", "none": f"{base}/cold/{query}",
            "healthz": f"{api}/healthz", "readyz": f"{api}/readyz", "metrics": f"{api}/metrics",
            "keda": f"{api}/v1/keda/demo"}
    urls = {k: urls[k] for k in names}
    try:
        for name, proc in (("stored", procs[0]), ("bare", procs[1]), ("none", procs[0])):
            if name in urls:
                wait_up(urls[name], proc)
        import httpx

        for mode in ("stored", "none"):
            if mode in urls:
                body = httpx.get(urls[mode]).json()
                want = "stored" if mode == "stored" else "computed"
                assert body["source"] == want and len(body["times"]) == 30, body
        for url in urls.values():  # every route answers 200 (a 503 would be cheap) and is warmed up
            assert httpx.get(url).status_code == 200, (url, httpx.get(url).text)
            run_wrk(url, args.connections, 2, args.threads)
        res = measure(urls, args)
        with docsection.printed_into(args.doc, "api", load, command):
            report(res, args, len(httpx.get(urls["stored"]).content))
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)
        cleanup(redis_url, prefix)
        shutil.rmtree(tmp, ignore_errors=True)


def measure(urls: dict[str, str], args) -> dict[str, list[dict]]:
    res: dict[str, list[dict]] = {k: [] for k in urls}
    names = list(urls)
    for i in range(args.rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:  # rotate which route runs first
            run_wrk(urls[name], args.connections, 1, args.threads)  # steady state (see the docstring)
            res[name].append(run_wrk(urls[name], args.connections, args.duration, args.threads))
    return res


LABELS = {"bare": "bare FastAPI GET /bare", "stored": "forecast, stored (demo)", "none": "forecast, none stored (cold)",
          "healthz": "GET /healthz", "readyz": "GET /readyz", "metrics": "GET /metrics", "keda": "GET /v1/keda/demo"}


def report(res: dict[str, list[dict]], args, body_bytes: int) -> None:
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "p50_ms", "p99_ms")} for k, v in res.items()}
    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, {args.rounds} rounds (route order rotated), "
          f"uvicorn --workers {args.workers}, loopback; medians (forecast body {body_bytes} bytes)")
    print(f"{'route':<32}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'p99/bare':>10}{'req/s/stored':>14}   rounds p99 ms")
    for k in res:
        rounds = " ".join(f"{r['p99_ms']:.1f}" for r in res[k])
        ratio = med[k]["p99_ms"] / med["bare"]["p99_ms"]
        vs = med[k]["rps"] / med["stored"]["rps"]
        print(f"{LABELS[k]:<32}{med[k]['rps']:>9.0f}{med[k]['p50_ms']:>9.2f}{med[k]['p99_ms']:>9.2f}"
              f"{ratio:>9.2f}x{vs:>13.2f}x   {rounds}")
    errs = sum(r["non2xx"] for v in res.values() for r in v)
    worst = max(med[k]["p99_ms"] / med["bare"]["p99_ms"] for k in ("stored", "none") if k in med)
    print(f"forecast p99 / bare p99, worse mode: {worst:.2f}x (target <= 1.3x)  "
          f"{'met' if worst <= 1.3 else 'NOT met'}  non-2xx responses: {errs}")
    hot = [k for k in med if k in ("healthz", "readyz", "metrics", "keda")]
    slow = [k for k in hot if med[k]["rps"] < med["stored"]["rps"]]
    if hot:
        print(f"hot routes' req/s at least the stored forecast's (target >= 1.0x): "
              f"{'met' if not slow else 'NOT met for ' + ', '.join(slow)}")


if __name__ == "__main__":
    main()
