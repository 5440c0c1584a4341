"""Scaler backends: one interface, four ways to set a deployment's replica count.

Every backend *sets a target* (``scale_to(n)``) and never increments, so
repeating a call is harmless.  ``scale_to`` never raises for a backend failure:
the returned :class:`ScaleResult` carries the error, so a broken API server or
webhook does not stop the control loop (bad arguments still raise).

- :class:`KubernetesScaler`: the scale subresource of a Deployment/StatefulSet
  through the official ``kubernetes`` client, with the reason and forecast
  written as annotations on the workload.
- :class:`LocalProcessScaler`: vLLM server processes on loopback ports of this
  machine (the single-machine default and how the end-to-end tests get real
  instances).
- :class:`WebhookScaler`: POSTs ``{"deployment", "replicas", "reason", ...}`` JSON
  to a URL, for any other autoscaler.
- :class:`DryRunScaler`: records only (forecast-only mode).
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import httpx

from warmcast.errors import InputError, WarmcastError

log = logging.getLogger(__name__)
MERGE = "application/merge-patch+json"


@dataclass(frozen=True)
class ScaleResult:
    deployment: str
    backend: str
    previous: int | None
    target: int
    reason: str
    applied: bool  # the backend accepted the target (False in dry-run or on error)
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def changed(self) -> bool:
        return self.applied and self.previous != self.target

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Scaler(ABC):
    """Sets the replica count of one deployment."""

    backend: str = "?"

    def __init__(self, deployment: str) -> None:
        self.deployment = deployment

    @abstractmethod
    def current(self) -> int:
        """The replica count the backend is set to now."""

    @abstractmethod
    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        """Set the target; return details for the result; raise on failure."""

    def scale_to(self, n: int, reason: str, forecast: Mapping[str, Any] | None = None) -> ScaleResult:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InputError(f"{self.deployment}: replicas must be a non-negative int, got {n!r}")
        if not reason:
            raise InputError(f"{self.deployment}: scale_to needs a reason")
        try:
            previous: int | None = self.current()
        except Exception as err:  # still try to set the target: it is idempotent
            log.warning("%s: reading current replicas failed: %s", self.deployment, err)
            previous = None
        try:
            detail = self._apply(n, reason, forecast)
        except Exception as err:
            msg = f"{self.backend} scaler for {self.deployment}: {type(err).__name__}: {err}"
            log.error("%s", msg)
            return ScaleResult(self.deployment, self.backend, previous, n, reason, applied=False, error=msg)
        return ScaleResult(self.deployment, self.backend, previous, n, reason,
                           applied=self.backend != "dryrun", detail=detail or {})

    def close(self) -> None:
        """Release resources (local processes are stopped)."""


class DryRunScaler(Scaler):
    """Records every decision and applies nothing; ``current()`` is the last recorded target."""

    backend = "dryrun"

    def __init__(self, deployment: str, initial: int = 0) -> None:
        super().__init__(deployment)
        self._target = initial
        self.history: list[ScaleResult] = []

    def current(self) -> int:
        return self._target

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        self._target = n
        return {"forecast": dict(forecast) if forecast else None}

    def scale_to(self, n: int, reason: str, forecast: Mapping[str, Any] | None = None) -> ScaleResult:
        result = super().scale_to(n, reason, forecast)
        self.history.append(result)
        return result


class WebhookScaler(Scaler):
    """POSTs the desired replica count as JSON; any 2xx answer means accepted.

    Body: ``{"deployment", "replicas", "reason", "previous", "forecast", "sent_at"}``.
    If the answer is JSON with an integer ``replicas``, that becomes ``current()``;
    otherwise ``current()`` is the last accepted target (``initial`` before any).
    """

    backend = "webhook"

    def __init__(self, deployment: str, url: str, *, token: str | None = None, timeout_s: float = 10.0,
                 retries: int = 3, backoff_s: float = 0.5, initial: int = 0,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(deployment)
        if not url.startswith(("http://", "https://")):
            raise InputError(f"webhook url must be http(s)://..., got {url!r}")
        self.url = url
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        self._target = initial
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)

    def current(self) -> int:
        return self._target

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        body = {"deployment": self.deployment, "replicas": n, "reason": reason, "previous": self._target,
                "forecast": dict(forecast) if forecast else None,
                "sent_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        last = ""
        for attempt in range(self.retries):
            try:
                r = self._http.post(self.url, json=body)
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if r.is_success:
                    try:
                        answer = r.json()
                    except ValueError:
                        answer = None
                    got = answer.get("replicas") if isinstance(answer, dict) else None
                    self._target = got if isinstance(got, int) and not isinstance(got, bool) else n
                    return {"status": r.status_code, "answer": answer}
                if r.status_code < 500 and r.status_code != 429:
                    raise WarmcastError(f"{self.url} answered HTTP {r.status_code}: {r.text[:200]}")
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            if attempt + 1 < self.retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        raise WarmcastError(f"{self.url} failed after {self.retries} attempts: {last}")

    def close(self) -> None:
        self._http.close()


class KubernetesScaler(Scaler):
    """The scale subresource of ``deployment/NAME`` or ``statefulset/NAME``.

    Replicas go through ``patch_namespaced_{deployment,stateful_set}_scale`` (a
    merge patch of ``spec.replicas``: a target, never an increment); the reason,
    target, forecast and time are then written as annotations (prefix
    ``warmcast.io/``) on the workload itself, since the Scale object does not
    keep annotations.  Pitfall: for a dict body the client picks the
    ``application/json-patch+json`` content type (it lists it first), which an
    API server rejects for an object body; the merge-patch type is forced.  Without an ``api_client`` the in-cluster config is tried,
    then ``~/.kube/config``.
    """

    backend = "kubernetes"

    def __init__(self, deployment: str, resource: str, namespace: str = "default", *,
                 api_client: Any = None, annotation_prefix: str = "warmcast.io") -> None:
        super().__init__(deployment)
        kind, _, name = resource.partition("/")
        if kind not in ("deployment", "statefulset") or not name:
            raise InputError(f"kubernetes resource must be deployment/NAME or statefulset/NAME, got {resource!r}")
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            api_client = client.ApiClient()
        self.kind, self.name, self.namespace = kind, name, namespace
        self.apps = client.AppsV1Api(api_client)
        self.prefix = annotation_prefix.rstrip("/")

    def _read_scale(self) -> Any:
        if self.kind == "deployment":
            return self.apps.read_namespaced_deployment_scale(self.name, self.namespace)
        return self.apps.read_namespaced_stateful_set_scale(self.name, self.namespace)

    def current(self) -> int:
        scale = self._read_scale()
        return int(scale.spec.replicas or 0)

    def annotations(self) -> dict[str, str]:
        if self.kind == "deployment":
            obj = self.apps.read_namespaced_deployment(self.name, self.namespace)
        else:
            obj = self.apps.read_namespaced_stateful_set(self.name, self.namespace)
        return dict(obj.metadata.annotations or {})

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        body = {"spec": {"replicas": n}}
        if self.kind == "deployment":
            scale = self.apps.patch_namespaced_deployment_scale(self.name, self.namespace, body, _content_type=MERGE)
        else:
            scale = self.apps.patch_namespaced_stateful_set_scale(self.name, self.namespace, body, _content_type=MERGE)
        notes = {
            f"{self.prefix}/reason": reason[:1000],
            f"{self.prefix}/target-replicas": str(n),
            f"{self.prefix}/updated-at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        if forecast:
            notes[f"{self.prefix}/forecast"] = json.dumps(dict(forecast), separators=(",", ":"), default=str)[:4000]
        meta = {"metadata": {"annotations": notes}}
        if self.kind == "deployment":
            self.apps.patch_namespaced_deployment(self.name, self.namespace, meta, _content_type=MERGE)
        else:
            self.apps.patch_namespaced_stateful_set(self.name, self.namespace, meta, _content_type=MERGE)
        return {"resource": f"{self.kind}/{self.name}", "namespace": self.namespace,
                "spec_replicas": scale.spec.replicas, "status_replicas": scale.status.replicas}


def check_profile(deployment: str, profile: str, known: Any) -> None:
    if profile not in known:
        raise InputError(f"{deployment}: no profile {profile!r}; this scaler has {sorted(known)}")


def profile_target(deployment: str, profile: str, known: Any, share: float, total: int) -> int:
    """How many of ``total`` replicas ``share`` of capacity on ``profile`` means (rounded up);
    an error naming the problem for a profile not in ``known`` or a share outside 0..1."""
    check_profile(deployment, profile, known)
    if not 0.0 <= share <= 1.0:
        raise InputError(f"{deployment}: profile share {share} is outside 0..1")
    return int(math.ceil(share * total - 1e-9))


class KubernetesProfileScaler(Scaler):
    """One Kubernetes workload per profile (``scaler.profile_resources``): replicas are the sum.

    A profile switch moves replicas between the workloads: :meth:`prewarm` adds to the target's,
    :meth:`set_profile` gives the target ``ceil(share * total)`` and takes them from the others
    (raising the target first, so capacity never dips), and a rollback is ``set_profile`` of the
    previous profile with share 1.  The planner's ``scale_to`` changes the workload serving the
    most replicas (the active profile; the first profile on a tie), scaling in the others first.
    """

    backend = "kubernetes"

    def __init__(self, deployment: str, resources: Mapping[str, str], namespace: str = "default", *,
                 api_client: Any = None) -> None:
        super().__init__(deployment)
        if not resources:
            raise InputError(f"{deployment}: profile_resources is empty")
        self.parts = {p: KubernetesScaler(f"{deployment}/{p}", r, namespace, api_client=api_client)
                      for p, r in resources.items()}

    def replicas(self) -> dict[str, int]:
        return {p: s.current() for p, s in self.parts.items()}

    def current(self) -> int:
        return sum(self.replicas().values())

    def _set(self, want: dict[str, int], reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        have = self.replicas()
        order = sorted(want, key=lambda p: want[p] <= have[p])  # increases before decreases
        for p in order:
            if want[p] != have[p]:
                res = self.parts[p].scale_to(want[p], reason, forecast)
                if not res.applied:
                    raise WarmcastError(res.error)
        return {"replicas": want, "before": have}

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        have = self.replicas()
        active = max(have, key=lambda p: have[p])  # max keeps the first profile on a tie
        want = dict(have)
        if n >= sum(have.values()):
            want[active] += n - sum(have.values())
        else:
            drop = sum(have.values()) - n
            for p in sorted(want, key=lambda p: p == active):  # the other profiles first
                d = min(drop, want[p])
                want[p] -= d
                drop -= d
        return self._set(want, reason, forecast)

    def set_profile(self, profile: str, share: float) -> dict[str, Any]:
        have = self.replicas()
        total = sum(have.values())
        target = max(have.get(profile, 0), profile_target(self.deployment, profile, self.parts, share, total))
        want = dict(have)
        want[profile] = target
        excess = sum(want.values()) - total
        for p in sorted((p for p in want if p != profile), key=lambda p: -want[p]):
            d = min(excess, want[p])
            want[p] -= d
            excess -= d
        out = self._set(want, f"profile switch: {share:.0%} of capacity on {profile}", None)
        return {"profile": profile, "on_profile": target, "of": total, "restarted": [], **out}

    def prewarm(self, profile: str, n: int) -> dict[str, Any]:
        check_profile(self.deployment, profile, self.parts)
        have = self.replicas()
        want = {**have, profile: have[profile] + max(0, int(n))}
        out = self._set(want, f"pre-warm {n} {profile} replica(s) ahead of a switch", None)
        return {"started": [f"{self.parts[profile].kind}/{self.parts[profile].name} +{n}"], **out}

    def profile_of(self) -> dict[str, str]:
        return {}  # pods are not addressed one by one here; Prometheus signals carry no profile


class LocalProcessScaler(Scaler):
    """vLLM server processes on loopback ports, one per replica.

    ``scale_to`` starts or stops processes and returns at once (a vLLM server
    needs tens of seconds to become healthy); :meth:`wait_ready` waits for
    them, :meth:`ready_urls` lists those answering ``/health``.  Exited
    processes are reaped and replaced on the next ``scale_to``; ``current()``
    counts processes alive (starting or ready).  Scaling down stops the newest
    first.

    Profiles: ``profiles`` maps each profile name to its engine args (``engine_args``
    alone is one unnamed profile).  New servers get ``profile``; :meth:`set_profile`
    restarts a share of the servers on another profile's args (a canary, all, or a
    rollback) and :meth:`prewarm` starts extra servers on one.  Which server runs which
    profile is kept in the state file with the servers.
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
            s = self._server(int(e["port"]), profile, slot=len(self.servers))
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
            {"port": s.port, "pid": s.pid, "url": s.url, "started_wall": s.started_wall, "profile": s.profile}
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
        from warmup.actuators.local import free_port

        if n > self.max_processes:
            raise InputError(f"{self.deployment}: {n} local processes exceed max_processes={self.max_processes}")
        reaped = self._reap()
        started, stopped = [], []
        while len(self.servers) > n:
            s = self.servers.pop()
            s.stop()
            stopped.append(s.url)
        while len(self.servers) < n:
            port = free_port(self.base_port, self.host, avoid={s.port for s in self.servers})
            s = self._server(port, profile, slot=len(self.servers)).start()
            self.servers.append(s)
            started.append(s.url)
        self._save()
        return {"started": started, "stopped": stopped, "reaped": reaped}

    def _server(self, port: int, profile: str, slot: int) -> Any:
        from warmup.actuators.local import LocalServer

        s = LocalServer(self.model, self.profiles[profile], port=port, host=self.host, python=self.python,
                        dev_mode=self.dev_mode, env=self._env_for(slot), log_dir=self.log_dir,
                        name=f"{self.deployment}@{self.host}:{port}", stop_at_exit=self.stop_at_exit)
        s.profile = profile
        return s

    # -- profiles -----------------------------------------------------------------

    @property
    def engine_args(self) -> dict[str, Any]:
        """The engine args new servers start with (those of :attr:`profile`)."""
        return self.profiles[self.profile]

    def profile_of(self) -> dict[str, str]:
        """Each server's URL and the profile it runs."""
        return {s.url: s.profile for s in self.servers}

    def set_profile(self, profile: str, share: float) -> dict[str, Any]:
        """Run ``profile`` on ``ceil(share * servers)`` of the servers, restarting the others'
        processes on its args, on the same ports (a canary, everything, or a rollback); with
        ``share`` 1 new servers get it too.  Returns what moved."""
        reaped = self._reap()
        want = profile_target(self.deployment, profile, self.profiles, share, len(self.servers))
        have = sum(1 for s in self.servers if s.profile == profile)
        restarted = []
        for i, old in enumerate(self.servers):
            if have >= want:
                break
            if old.profile != profile:
                old.stop()
                self.servers[i] = self._server(old.port, profile, slot=i).start()
                restarted.append(old.url)
                have += 1
        if share >= 1.0:
            self.profile = profile
        self._save()
        return {"profile": profile, "on_profile": have, "of": len(self.servers), "restarted": restarted,
                "reaped": reaped}

    def prewarm(self, profile: str, n: int) -> dict[str, Any]:
        """Start ``n`` more servers on ``profile`` (ahead of a switch to it)."""
        check_profile(self.deployment, profile, self.profiles)
        return self._grow_or_shrink(len(self.servers) + max(0, int(n)), profile)

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


def scaler_for(deployment: Any, *, dry_run: bool = False, state_dir: str | Path | None = None,
               **local_kwargs: Any) -> Scaler:
    """Build the scaler a :class:`warmcast.deployments.Deployment` asks for.

    ``dry_run`` (the settings' forecast-only mode) always gives a DryRunScaler.
    The local backend is cached per deployment in this process and keeps its
    processes in ``STATE/local-scaler/NAME.json`` (``state_dir``, else
    ``$WARMCAST_STATE_DIR``, else a temp dir), so every call and every worker
    process sees the same servers; they are not stopped when a worker exits.
    """
    spec = deployment.scaler
    if dry_run or spec.kind == "dryrun":
        return DryRunScaler(deployment.name, initial=deployment.min_replicas)
    if spec.kind == "kubernetes" and spec.profile_resources:
        return KubernetesProfileScaler(deployment.name, spec.profile_resources, spec.namespace)
    if spec.kind == "kubernetes":
        return KubernetesScaler(deployment.name, spec.resource, spec.namespace)
    if spec.kind == "webhook":
        token = os.environ.get(spec.token_env) if spec.token_env else None
        return WebhookScaler(deployment.name, spec.url, token=token)
    if spec.kind == "local":
        key = (deployment.name, str(state_dir))
        cached = _LOCAL_SCALERS.get(key)
        if cached is not None and not local_kwargs:
            return cached
        scaler = local_scaler_factory(deployment, state_dir, **local_kwargs)()
        if not local_kwargs:
            _LOCAL_SCALERS[key] = scaler
        return scaler
    raise InputError(f"deployment {deployment.name}: unknown scaler kind {spec.kind!r}")
