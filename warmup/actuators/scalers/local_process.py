"""Local-process backend: vLLM server processes on loopback ports of this machine (the
single-machine default and how the end-to-end tests get real instances)."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from warmcast.errors import InputError
from warmup.actuators.scalers.base import Scaler, check_profile

log = logging.getLogger(__name__)


class LocalProcessScaler(Scaler):
    """vLLM server processes on loopback ports, one per replica.

    ``scale_to`` starts or stops processes and returns at once (a vLLM server
    needs tens of seconds to become healthy); :meth:`wait_ready` waits for
    them, :meth:`ready_urls` lists those answering ``/health``.  Exited
    processes are reaped and replaced on the next ``scale_to``; ``current()``
    counts processes alive (starting or ready).  Scaling down stops the newest
    first.

    Profiles: ``profiles`` maps each profile name to its engine args (``engine_args``
    alone is one unnamed profile).  New servers get ``profile``; :meth:`set_replicas`
    sets the servers per profile that a switch's phase gives (new ones start before surplus
    ones stop).  Which server runs which profile is kept in the state file with the servers.
    """

    backend = "local"

    def __init__(self, deployment: str, model: str | Path, engine_args: Mapping[str, Any] | None = None, *,
                 profiles: Mapping[str, Mapping[str, Any]] | None = None, profile: str | None = None,
                 base_port: int = 8100, host: str = "127.0.0.1", python: str | Path | None = None,
                 dev_mode: bool = False, env: Mapping[str, str] | None = None,
                 log_dir: str | Path | None = None, max_processes: int = 8,
                 state_file: str | Path | None = None, stop_at_exit: bool = True) -> None:
        super().__init__(deployment)
        if (engine_args is None) == (profiles is None):
            raise InputError(f"{deployment}: give the local scaler engine_args or profiles, not both or neither")
        self.profiles = {k: dict(v) for k, v in profiles.items()} if profiles is not None else {"": dict(engine_args)}
        self.profile = profile if profile is not None else next(iter(self.profiles))
        check_profile(deployment, self.profile, self.profiles)
        self.model = str(model)
        self.base_port = base_port
        self.host = host
        self.python = python
        self.dev_mode = dev_mode
        self.env = dict(env or {})
        self.log_dir = Path(log_dir) if log_dir else None
        self.max_processes = max_processes
        self.servers: list[Any] = []  # LocalServer, imported lazily; each has a .profile
        self.exited: list[Any] = []
        self.state_file = Path(state_file) if state_file else None
        self.stop_at_exit = stop_at_exit
        self.adopted = self._adopt()

    # -- state file: other warmcast processes (worker restarts, CLI) see the same servers --

    def _adopt(self) -> list[str]:
        if not self.state_file or not self.state_file.exists():
            return []
        try:
            data = json.loads(self.state_file.read_text())
            entries = data.get("servers", [])
        except (OSError, ValueError):
            log.warning("%s: unreadable local-scaler state %s; starting empty", self.deployment, self.state_file)
            return []
        if data.get("profile") in self.profiles:
            self.profile = data["profile"]
        adopted = []
        for e in entries:
            profile = e.get("profile", self.profile)
            if profile not in self.profiles:  # the deployments file lost that profile: leave the server alone
                log.warning("%s: server on port %s runs unknown profile %r; not adopted", self.deployment,
                            e["port"], profile)
                continue
            # the core a server was bound to at launch: a new one must not share it
            slot = int(e["slot"]) if isinstance(e.get("slot"), int) else self._free_slot()
            s = self._server(int(e["port"]), profile, slot=slot)
            if s.adopt(int(e["pid"]), e.get("started_wall")):
                self.servers.append(s)
                adopted.append(s.url)
        self._save()
        return adopted

    def _save(self) -> None:
        if not self.state_file:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        data = {"deployment": self.deployment, "profile": self.profile, "servers": [
            {"port": s.port, "pid": s.pid, "url": s.url, "started_wall": s.started_wall, "profile": s.profile,
             "slot": s.slot}
            for s in self.servers]}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.state_file)

    def _reap(self) -> list[str]:
        gone = [s for s in self.servers if not s.alive]
        for s in gone:
            self.servers.remove(s)
            self.exited.append(s)
        if gone:
            self._save()
        return [f"{s.name} exited with code {s.returncode()}" for s in gone]

    def current(self) -> int:
        self._reap()
        return len(self.servers)

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        return self._grow_or_shrink(n, self.profile)

    def _grow_or_shrink(self, n: int, profile: str) -> dict[str, Any]:
        if n > self.max_processes:
            raise InputError(f"{self.deployment}: {n} local processes exceed max_processes={self.max_processes}")
        reaped = self._reap()
        started, stopped = [], []
        while len(self.servers) > n:
            s = self.servers.pop()
            s.stop()
            stopped.append(s.url)
        while len(self.servers) < n:
            started.append(self._start_one(profile))
        self._save()
        return {"started": started, "stopped": stopped, "reaped": reaped}

    def _server(self, port: int, profile: str, slot: int) -> Any:
        from warmup.actuators.local import LocalServer

        s = LocalServer(self.model, self.profiles[profile], port=port, host=self.host, python=self.python,
                        dev_mode=self.dev_mode, env=self._env_for(slot), log_dir=self.log_dir,
                        name=f"{self.deployment}@{self.host}:{port}", stop_at_exit=self.stop_at_exit)
        s.profile, s.slot = profile, slot
        return s

    # -- profiles -----------------------------------------------------------------

    @property
    def engine_args(self) -> dict[str, Any]:
        """The engine args new servers start with (those of :attr:`profile`)."""
        return self.profiles[self.profile]

    def profile_of(self) -> dict[str, str]:
        """Each server's URL and the profile it runs."""
        return {s.url: s.profile for s in self.servers}

    def set_replicas(self, want: Mapping[str, int], reason: str = "", active: str | None = None) -> dict[str, Any]:
        """Servers per profile (a switch's split): new servers start first, then surplus ones stop,
        a profile's not-yet-healthy servers before its healthy ones; ``active`` becomes the profile
        new servers get.  The core cuts a profile only as the other's servers answer /health."""
        for p in want:
            check_profile(self.deployment, p, self.profiles)
        reaped, started, stopped = self._reap(), [], []
        for p, n in want.items():
            while sum(1 for s in self.servers if s.profile == p) < n:
                started.append(self._start_one(p))
        for p, n in want.items():
            mine = sorted((s for s in self.servers if s.profile == p), key=lambda s: s.check_healthy(1.0))
            for s in mine[:max(0, len(mine) - int(n))]:
                self.servers.remove(s)
                s.stop()
                stopped.append(s.url)
        if active is not None:
            check_profile(self.deployment, active, self.profiles)
            self.profile = active
        self._save()
        return {"replicas": {p: sum(1 for s in self.servers if s.profile == p) for p in self.profiles},
                "started": started, "stopped": stopped, "reaped": reaped}

    def _start_one(self, profile: str) -> str:
        from warmup.actuators.local import free_port

        if len(self.servers) >= self.max_processes:
            raise InputError(f"{self.deployment}: another server would exceed max_processes={self.max_processes}")
        port = free_port(self.base_port, self.host, avoid={s.port for s in self.servers})
        s = self._server(port, profile, slot=self._free_slot()).start()
        self.servers.append(s)
        return s.url

    def _free_slot(self) -> int:
        """The lowest core slot no live server holds.  Two CPU engines on one core starve each
        other: a loaded one's spinning OpenMP threads kept a new one from booting for minutes."""
        taken = {s.slot for s in self.servers}
        return next(i for i in range(len(self.servers) + 1) if i not in taken)

    def ready_by_profile(self) -> dict[str, int]:
        """Servers answering /health, per profile."""
        out = {p: 0 for p in self.profiles}
        for s in self.servers:
            if s.check_healthy():
                out[s.profile] = out.get(s.profile, 0) + 1
        return out

    def _env_for(self, slot: int) -> dict[str, str]:
        from warmup.actuators.local import one_core_env

        return one_core_env(slot, self.env)  # one core per local CPU engine, or they starve each other

    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def ready_urls(self) -> list[str]:
        return [s.url for s in self.servers if s.check_healthy()]

    async def wait_ready(self, timeout_s: float = 240.0) -> dict[str, float]:
        """Wait until every live process is healthy; returns seconds-from-launch per URL.

        A process that crashes raises :class:`~warmup.actuators.local.InstanceCrashed`.
        """
        import asyncio

        times = await asyncio.gather(*(s.wait_healthy(timeout_s) for s in self.servers))
        return {s.url: t for s, t in zip(self.servers, times)}

    def close(self) -> None:
        """Stop every process (the scaler's own and adopted ones)."""
        for s in self.servers:
            s.stop()
        self.exited.extend(self.servers)
        self.servers.clear()
        self._save()

    def detach(self) -> None:
        """Forget the processes without stopping them (another process adopts them from the state file)."""
        self.servers.clear()


_LOCAL_SCALERS: dict[tuple[str, str], "LocalProcessScaler"] = {}


def local_scaler_factory(deployment: Any, state_dir: str | Path | None = None,
                         **kwargs: Any) -> Callable[[], LocalProcessScaler]:
    """A builder of LocalProcessScalers for a deployment, each adopting the servers in its state
    file (``STATE/local-scaler/NAME.json``; ``state_dir``, else ``$WARMCAST_STATE_DIR``, else a
    temp dir).  The launch spec of every profile (which writes the tiny model's config.json for
    ``model: dummy``) is computed once, here."""
    from warmup.actuators.launch import local_profiles_spec, local_state_dir

    model, profiles, notes = local_profiles_spec(deployment, state_dir=state_dir)
    for note in notes:
        log.info("%s: %s", deployment.name, note)
    base = local_state_dir(state_dir)
    spec = deployment.scaler
    kw: dict[str, Any] = {"state_file": base / "local-scaler" / f"{deployment.name}.json",
                          "log_dir": base / "vllm-logs", "stop_at_exit": False, "base_port": spec.base_port,
                          "python": spec.python, **kwargs}
    return lambda: LocalProcessScaler(deployment.name, model, profiles=profiles,
                                      profile=deployment.default_profile, **kw)


def local_scaler(deployment: Any, state_dir: str | Path | None = None, **kwargs: Any) -> LocalProcessScaler:
    """The deployment's LocalProcessScaler, cached per (deployment, state dir) in this process
    unless ``kwargs`` customise it, so every call in a worker sees the same servers."""
    key = (deployment.name, str(state_dir))
    cached = _LOCAL_SCALERS.get(key)
    if cached is not None and not kwargs:
        return cached
    scaler = local_scaler_factory(deployment, state_dir, **kwargs)()
    if not kwargs:
        _LOCAL_SCALERS[key] = scaler
    return scaler
