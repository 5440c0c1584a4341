"""``warmcast run --simulate``: Redis, worker, beat and API as real processes; Ctrl-C stops them all."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

import httpx
import pytest

from loophelpers import ROOT, free_port, wait_for

pytestmark = pytest.mark.integration


def test_run_simulate_makes_forecasts_and_decisions_then_stops_on_ctrl_c(tmp_path, redis_server_url, key_prefix):
    api_port, metrics_port = free_port(), free_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("WARMCAST_DEPLOYMENTS_FILE", None)
    out = open(tmp_path / "run.out", "w")
    p = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "run", "--simulate", "--api-port", str(api_port),
                          "--metrics-port", str(metrics_port), "--status-every", "5"], cwd=ROOT, env=env,
                         stdout=out, stderr=subprocess.STDOUT)
    try:
        from warmcast.config.settings import load_settings
        from workers.context import Ctx
        from workers.options import WorkerOptions
        import redis

        ctx = Ctx(load_settings(redis_url=redis_server_url, key_prefix=f"{key_prefix}:sim",
                                state_dir=tmp_path / "state"),
                  WorkerOptions(simulate=True), redis.Redis.from_url(redis_server_url))
        text = lambda: (tmp_path / "run.out").read_text()  # noqa: E731
        wait_for(lambda: ctx.state.get_forecast("demo"), 60, f"a forecast of the demo deployment\n{text()}")
        # on a busy machine the kick-off's first plan may run before its first forecast is stored
        rows = wait_for(lambda: [r for r in ctx.state.audit_log("demo", kind="scale") if r["inputs"]["forecast_model"]],
                        60, f"a planning decision on a forecast\n{text()}")
        assert rows[0]["reason"] and rows[0]["applied"]
        wait_for(lambda: "plan:" in text(), 30, "a status line with the plan")
        r = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        assert 'warmcast_decisions_total{applied="true",deployment="demo",kind="scale"' in r.text
        if "API and dashboard" in text():
            wait_for(lambda: _ok(f"http://127.0.0.1:{api_port}/healthz"), 60, f"the API\n{text()}")
        p.send_signal(signal.SIGINT)  # Ctrl-C
        assert p.wait(timeout=40) in (0, 130), text()
        assert "stopped." in text()
        assert not _ok(f"http://127.0.0.1:{api_port}/healthz")
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_run_simulate_leaves_the_quickstart_history_alone(tmp_path, redis_server_url, redis_client, key_prefix, snap):
    """Issue 32 item 6: the simulated run wrote its synthetic minutes (dated now) into ``demo``; retention then
    dropped the quickstart's 2024 days.  It now works under ``<prefix>:sim``: the quickstart's keys are as they
    were, and the simulated history is under its own prefix."""
    import pandas as pd

    from warmcast.store import LoadStore

    quick = pd.date_range("2024-01-01", periods=3 * 1440, freq="min")
    LoadStore(redis_client, key_prefix).upsert_frame("demo", pd.DataFrame({"requests": 500.0}, index=quick))
    before = {k: v for k, v in snap().items() if not k.startswith(f"{key_prefix}:sim:".encode())}
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("WARMCAST_DEPLOYMENTS_FILE", None)
    res = subprocess.run([sys.executable, "-m", "warmcast.cli", "run", "--simulate", "--no-api", "--metrics-port", "0",
                          "--duration", "3"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    after = {k: v for k, v in snap().items() if not k.startswith(f"{key_prefix}:sim:".encode())}
    assert after == before
    assert LoadStore(redis_client, key_prefix).series("demo").index[0] == quick[0]
    assert len(LoadStore(redis_client, f"{key_prefix}:sim").series("demo")) >= 7 * 1440
    assert f"key prefix '{key_prefix}:sim'" in res.stdout


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _run_args(api_port: int) -> list[str]:
    return [sys.executable, "-m", "warmcast.cli", "run", "--simulate", "--api-port", str(api_port),
            "--metrics-port", "0", "--status-every", "1"]


def _run_process(p: subprocess.Popen, via_shell: bool):
    """The `warmcast run` process: ``p`` itself, or bash's child running it in a pipeline."""
    import psutil

    if not via_shell:
        return psutil.Process(p.pid)
    found = wait_for(lambda: [c for c in psutil.Process(p.pid).children() if "warmcast.cli" in " ".join(c.cmdline())],
                     30, "warmcast run in the pipeline")
    return found[0]


@pytest.mark.parametrize("how", ["ctrl-c", "SIGTERM", "SIGHUP", "stdout-closed", "tee-then-ctrl-c"])
def test_run_children_end_with_it(tmp_path, redis_server_url, key_prefix, how):
    """Issue 11: worker, beat and API are in `warmcast run`'s process group and end with it on a
    Ctrl-C (the terminal signals the whole group), SIGTERM or SIGHUP to it alone, its stdout
    pipe closing, and `warmcast run ... 2>&1 | tee log` then Ctrl-C; none keeps the API port."""
    import psutil

    api_port = free_port()
    env = {**os.environ, "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix,
           "WARMCAST_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("WARMCAST_DEPLOYMENTS_FILE", None)
    via_shell = how == "tee-then-ctrl-c"
    cmd = ["bash", "-c", f"{shlex.join(_run_args(api_port))} 2>&1 | tee {shlex.quote(str(tmp_path / 'log'))}"] \
        if via_shell else _run_args(api_port)
    out = subprocess.PIPE if how == "stdout-closed" else open(tmp_path / "run.out", "w")
    # its own session, as a shell job is: a terminal's Ctrl-C signals that whole process group
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    procs: list = []
    try:
        run = _run_process(p, via_shell)
        kids = wait_for(lambda: len(run.children()) >= 3 and run.children(), 120, "worker, beat and API started")
        procs = [run, *kids]
        assert all(os.getpgid(k.pid) == os.getpgid(run.pid) for k in kids)  # one process group
        wait_for(lambda: _ok(f"http://127.0.0.1:{api_port}/healthz"), 90, "the API")
        if how in ("ctrl-c", "tee-then-ctrl-c"):
            os.killpg(p.pid, signal.SIGINT)
        elif how == "stdout-closed":
            p.stdout.close()  # the reader is gone: the next status line meets a closed pipe
        else:
            run.send_signal(getattr(signal, how))
        gone, alive = psutil.wait_procs([run, *kids], timeout=60)
        assert alive == [], f"still running after {how}: {[a.cmdline()[:4] for a in alive]}"
        assert not _ok(f"http://127.0.0.1:{api_port}/healthz")
    finally:
        for proc in procs:  # a failed run must not leave its children behind either
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@pytest.mark.parametrize("command", ["worker", "beat"])
def test_round2_worker_and_beat_refuse_an_invalid_deployments_file(tmp_path, redis_server_url, key_prefix, command):
    """Issue 31: both started on a deployments file they could not use, then failed every task."""
    bad = tmp_path / "deployments.yaml"
    bad.write_text("deployments:\n  - name: x\n    max_replicas: -3\n")
    env = {**os.environ, "WARMCAST_DEPLOYMENTS_FILE": str(bad), "WARMCAST_REDIS_URL": redis_server_url,
           "WARMCAST_KEY_PREFIX": key_prefix, "WARMCAST_STATE_DIR": str(tmp_path / "state")}
    res = subprocess.run([sys.executable, "-m", "warmcast.cli", command], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "deployment x: max_replicas" in res.stderr, (res.returncode, res.stderr[-500:])
    assert "celery" not in res.stdout.lower()   # nothing was started


@pytest.mark.parametrize("how", ["SIGHUP", "SIGTERM", "SIGKILL"])
def test_round2_embedded_redis_ends_with_run_signalled_as_it_starts(tmp_path, how):
    """Issue 32: `warmcast run` with no Redis URL starts an embedded redis-server (in its own session);
    a terminal closed (SIGHUP) or a SIGTERM in its first second, before its signal handlers were
    installed, ended `run` and left the server running. It must end with `run` however `run` ends."""
    import psutil

    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMCAST_")}  # no URL: the embedded server
    env.update(WARMCAST_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    # a terminal's process has SIGHUP's default action; a runner started under nohup passes SIG_IGN
    # down, and `run` then rightly goes on (CI started with nohup failed here on that alone)
    p = subprocess.Popen([sys.executable, "-m", "warmcast.cli", "run", "--simulate", "--no-api", "--metrics-port", "0"],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    run, servers = psutil.Process(p.pid), []
    try:
        # the signal goes the moment the server exists: run is still starting, its handlers not yet there
        servers = wait_for(lambda: [c for c in run.children() if _is_redis_server(c)], 30,
                           "the embedded redis-server", poll=0.01)
        run.send_signal(getattr(signal, how))
        p.wait(timeout=30)
        gone, alive = psutil.wait_procs(servers, timeout=10)
        assert alive == [], f"redis-server {[a.pid for a in alive]} outlived `warmcast run` ended by {how}"
    finally:
        for s in servers:
            if s.is_running():
                s.kill()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _is_redis_server(proc) -> bool:
    import psutil

    try:
        return "redis-server" in " ".join(proc.cmdline()[:1])
    except psutil.Error:  # just forked or already gone
        return False
