"""What a task needs, built once per worker process: settings, Redis, stores, fleet, adapters.

A deployment's view (its effective deployment, its core configuration with every layer and the
planner's lead) is built once per tick: :meth:`Ctx.pinned` builds it and every step of the tick
reads that one view through ``dep``, ``cfg`` and ``lead`` (issue 42: a tick re-resolved the
deployment about nine times, and a layer changing mid-tick could give two steps two values).
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

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


@dataclass(frozen=True)
class View:
    """One deployment as a tick decides with it: the file's entry with alert-derived changes, the
    core configuration (file, re-tune, manual, alert and calibration layers) and the planner's lead."""

    name: str
    dep: Deployment
    sig: tuple            # what alert responses changed (a derived profile, a failover)
    cfg: Any              # warmup.core.CoreConfig, before the lead
    lead: Any             # warmup.core.lead.Lead, the planner's


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
        self._pools: list[Any] = []
        self._local = threading.local()   # pinned views are the tick's own: worker threads share the Ctx
        self._scalers: dict[str, RecordingScaler] = {}
        self._sims: dict[str, SimFleet] = {}
        self.cache: dict[str, Any] = {}  # per-process caches (forecast models, previous scrapes)

    # ------------------------------------------------------------ deployments
    def deployments(self) -> list[Deployment]:
        """The deployments file's deployments, re-read when the file changes (workers/fleetfile.py: looked
        at every few seconds, a change validated first; a refused change keeps these and says why)."""
        from workers.fleetfile import FleetFile

        fleet = self.cache.get("fleetfile")
        if fleet is None:
            fleet = self.cache["fleetfile"] = FleetFile(self.settings, self.state)
        deps = fleet.current()
        if deps is not self._deps:
            # what this process built from a changed (or removed) deployment's old entry is built anew
            for name in [n for n, d in (self._deps or {}).items() if deps.get(n) != d]:
                self._sims.pop(name, None)
                self._scalers.pop(name, None)
                self.cache.pop(("effective", name), None)
            self._deps = deps
            self._pools = list(fleet.file.node_pools)
        return list(self._deps.values())

    def node_pools(self) -> list[Any]:
        """The deployments file's node pools (``warmcast.config.node_pools.NodePool``)."""
        self.deployments()
        return list(self._pools)

    def dep(self, name: str) -> Deployment:
        self._known(name)
        return self._effective(name)[0]

    def _known(self, name: str) -> None:
        """Refuse a deployment the file does not name, with the ones it does."""
        self.deployments()
        if name not in self._deps:
            from warmcast.errors import NotFoundError

            raise NotFoundError(f"unknown deployment {name!r}; known: {sorted(self._deps)}")

    @property
    def _pinned(self) -> dict[str, View]:
        if not hasattr(self._local, "views"):
            self._local.views = {}
        return self._local.views

    def view(self, name: str) -> View:
        """``name``'s view: the pinned one inside :meth:`pinned` (this thread's), else built now."""
        if name in self._pinned:
            return self._pinned[name]
        from warmup.actuators.coldstart import resolve_lead

        self._known(name)
        dep, sig = self._effective(name)
        return View(name, dep, sig, self.core_config(dep), resolve_lead(self.r, self.prefix, dep))

    def pinned_view(self, name: str) -> View | None:
        return self._pinned.get(name)

    @contextmanager
    def pinned(self, name: str) -> Iterator[View]:
        """Build ``name``'s view once and answer every ``dep``/``cfg``/``view`` of it from that until
        the block ends (one tick); nested pins of the same deployment share the outer one."""
        if name in self._pinned:
            yield self._pinned[name]
            return
        self._pinned[name] = self.view(name)
        try:
            yield self._pinned[name]
        finally:
            self._pinned.pop(name, None)

    def _effective(self, name: str) -> tuple[Deployment, tuple]:
        """The file's deployment with the profiles alert responses derived and, while failed over,
        its DR scaler (workers/alerting/state.py), and a signature of those changes; read from Redis
        at most once a second per deployment (a task asks for its deployment many times)."""
        import time

        from workers.alerting.state import effective

        if name in self._pinned:
            return self._pinned[name].dep, self._pinned[name].sig
        hit = self.cache.get(("effective", name))
        if hit is None or time.monotonic() - hit[0] > EFFECTIVE_TTL_S:
            hit = self.cache[("effective", name)] = (time.monotonic(), effective(self.r, self.prefix, self._deps[name]))
        return hit[1]

    def cfg(self, name: str):
        if name in self._pinned:
            return self._pinned[name].cfg
        return self.core_config(self.dep(name))

    def core_config(self, dep: Deployment):
        """The core configuration the loop decides with for ``dep`` (every layer); a replay's context
        answers with the live loop's, read when it began."""
        if self.options.replayed_fleet:   # a replay through a worker: the driver's (workers/replay_worker.py)
            from warmup.core import CoreConfig
            from workers.replay_fleet import CORE
            from workers.serde import from_json

            doc = self.state.get(CORE, dep.name)
            if doc is not None:
                return from_json(CoreConfig, doc)
        return live_core_config(self.r, self.prefix, dep, dry_run=self.settings.dry_run)

    # ------------------------------------------------------------ fleets
    @property
    def simulate(self) -> bool:
        return self.options.simulate or self.options.replayed_fleet

    def sim(self, name: str) -> SimFleet | StoredFleet:
        if self.options.replayed_fleet:
            return StoredFleet(self.state, name)
        if name not in self._sims:
            from warmup.sim.latency import ttft_bound

            d = self.dep(name)
            # the simulated fleet serves what the file declares per profile; P99s are read against
            # the deployment's own bound, on the default curve (issue 42)
            self._sims[name] = SimFleet(self.r, self.prefix, name, d.capacity_rpm, d.cold_start_min,
                                        d.default_profile, d.sleep.wake_s if d.sleep is not None else None,
                                        {p: prof.capacity_rpm for p, prof in d.profiles.items()},
                                        ttft_bound({}, d.slo)[0])
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
