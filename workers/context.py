"""What a task needs, built once per worker process: settings, Redis, stores, fleet, adapters."""
from __future__ import annotations

import os
from typing import Any

import redis

from warmcast.config.deployments import Deployment
from warmcast.config.settings import Settings
from warmcast.state import StateStore
from warmcast.store import LoadStore
from workers.actuation import RecordingScaler, live_scaler
from workers.coreconfig import live_core_config
from workers.options import WorkerOptions
from workers.replay_fleet import StoredFleet
from workers.simfleet import SimFleet


EFFECTIVE_TTL_S = 1.0  # how stale a derived profile or a failover may be seen by this process


class Ctx:
    def __init__(self, settings: Settings, options: WorkerOptions, client: redis.Redis | None = None) -> None:
        from warmcast.runtime import redis_client

        self.settings = settings
        self.options = options
        self.r = client or redis_client(settings)
        self.prefix = settings.key_prefix
        self.state = StateStore(self.r, self.prefix)
        self.store = LoadStore(self.r, self.prefix, settings.retention_days)
        self._deps: dict[str, Deployment] | None = None
        self._scalers: dict[str, RecordingScaler] = {}
        self._sims: dict[str, SimFleet] = {}
        self.cache: dict[str, Any] = {}  # per-process caches (forecast models, previous scrapes)

    # ------------------------------------------------------------ deployments
    def deployments(self) -> list[Deployment]:
        if self._deps is None:
            from warmcast.runtime import load_fleet

            self._deps = {d.name: d for d in load_fleet(self.settings).deployments}
        return list(self._deps.values())

    def dep(self, name: str) -> Deployment:
        self.deployments()
        if name not in self._deps:
            from warmcast.errors import NotFoundError

            raise NotFoundError(f"unknown deployment {name!r}; known: {sorted(self._deps)}")
        return self._effective(name)[0]

    def _effective(self, name: str) -> tuple[Deployment, tuple]:
        """The file's deployment with the profiles alert responses derived and, while failed over,
        its DR scaler (workers/alerting/state.py), and a signature of those changes; read from Redis
        at most once a second per deployment (a task asks for its deployment many times)."""
        import time

        from workers.alerting.state import effective

        hit = self.cache.get(("effective", name))
        if hit is None or time.monotonic() - hit[0] > EFFECTIVE_TTL_S:
            hit = self.cache[("effective", name)] = (time.monotonic(), effective(self.r, self.prefix, self._deps[name]))
        return hit[1]

    def cfg(self, name: str):
        return live_core_config(self.r, self.prefix, self.dep(name), dry_run=self.settings.dry_run)

    # ------------------------------------------------------------ fleets
    @property
    def simulate(self) -> bool:
        return self.options.simulate or self.options.replayed_fleet

    def sim(self, name: str) -> SimFleet | StoredFleet:
        if self.options.replayed_fleet:
            return StoredFleet(self.state, name)
        if name not in self._sims:
            d = self.dep(name)
            self._sims[name] = SimFleet(self.r, self.prefix, name, d.capacity_rpm, d.cold_start_min,
                                        d.default_profile, d.sleep.wake_s if d.sleep is not None else None)
        return self._sims[name]

    def scaler(self, name: str) -> RecordingScaler:
        dep = self.dep(name)
        sig = self._effective(name)[1]
        # Rebuilt when alert responses derived a profile or failed over to the DR target.
        if name not in self._scalers or getattr(self._scalers[name], "sig", ()) != sig:
            inner = self.sim(name) if self.simulate else live_scaler(dep, self.r, self.prefix, self.settings.state_dir)
            self._scalers[name] = RecordingScaler(inner, self.r, self.prefix, name)
            self._scalers[name].sig = sig
        return self._scalers[name]

    def token(self, name: str) -> str | None:
        env = self.dep(name).api_token_env
        return os.environ.get(env) if env else None


_ctx: Ctx | None = None


def get_ctx(app=None) -> Ctx:
    """The process-wide context of the Celery app running the tasks."""
    global _ctx
    if _ctx is None:
        from workers.app import celery_app

        a = app or celery_app
        _ctx = Ctx(a.wc_settings, a.wc_options)
    return _ctx
