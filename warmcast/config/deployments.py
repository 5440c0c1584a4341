"""The deployments file: what each vLLM deployment is and how to reach and scale it.

See ``examples/deployments.yaml`` for a commented example.  Loading validates the
whole file and raises :class:`InputError` naming the deployment and the key.
"""
from __future__ import annotations

import re
from datetime import time
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationError, field_validator, model_validator

from warmcast.config.alerts import AlertSpec
from warmcast.errors import InputError, NotFoundError
from warmcast.forecast import DEFAULT_QUANTILES
from warmcast.config.node_pools import NodePool, check_fleet
from warmcast.config.pools import GpuSpec, PoolsSpec, check_against
from warmcast.config.sleep_tier import SleepTier
from warmcast.config.slo import SLO
from warmcast.config.strict import MAX_INSTANCES, Strict
from warmcast.config.yamlfile import read_yaml
from warmcast.text import clip, shown

# Full match (\A..\Z, never ^..$: $ also matches before a final newline): a name becomes a
# Redis key and a folder under models/, so nothing else may ride along.
NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,62}\Z")
NAME_RULE = "1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"
MESSAGE_CHARS = 300  # one key's complaint, at most


def check_deployment_name(name: str) -> str:
    """The name itself if it is a valid deployment name; InputError otherwise."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InputError(f"deployment name {shown(name)} must be {NAME_RULE}")
    return name



class Profile(Strict):
    """A set of vLLM engine arguments and the capacity one instance has with them."""

    capacity_rpm: float = Field(gt=0, description="requests/min one instance serves at 100% utilisation")
    capacity_tokens_per_s: float | None = Field(None, gt=0, description="generated+prompt tokens/s per instance")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="vLLM CLI args without leading --")


class ScheduleWindow(Strict):
    profile: str
    start: time
    end: time  # may be earlier than start: the window wraps past midnight


class MixTriggerSpec(Strict):
    """Switch to ``profile`` while the live share of prompts longer than ``long_tokens`` holds at or
    above ``share`` for ``sustain_min`` minutes (warmup/core/mix_trigger.py), whatever the clock says."""

    profile: str
    long_tokens: int = Field(4096, ge=1, le=10_000_000)
    share: float = Field(0.3, gt=0, le=1)
    sustain_min: int = Field(10, ge=1, le=1440)


class Schedule(Strict):
    timezone: str = "UTC"
    windows: list[ScheduleWindow] = Field(default_factory=list)
    mix_trigger: MixTriggerSpec | None = None  # live context mix, checked every tick

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {shown(v)} (use an IANA name such as Europe/Berlin)") from None
        return v

    @property
    def tzinfo(self) -> ZoneInfo:
        """The time zone object (reads the tz database: here, so that the decision core does not)."""
        return ZoneInfo(self.timezone)


class ScalerSpec(Strict):
    """How instances are scaled. Only the keys of the chosen kind are read."""

    kind: Literal["local", "kubernetes", "webhook", "dryrun"] = "dryrun"
    # local: vLLM server processes on loopback ports of this machine
    python: str | None = None
    model_dir: str | None = None
    base_port: int = Field(8100, ge=1024, le=65000)
    # kubernetes: the scale subresource of a Deployment or StatefulSet
    namespace: str = "default"
    resource: str | None = None  # "deployment/NAME" or "statefulset/NAME"
    # optional: one workload per profile, e.g. {day: deployment/chat-day, night: deployment/chat-night};
    # profile switches then move replicas between them (resource is not used)
    profile_resources: dict[str, str] = Field(default_factory=dict)
    # webhook: POST {"deployment", "replicas", "reason"} to this URL
    url: str | None = None
    token_env: str | None = None  # name of the env var holding a bearer token

    @model_validator(mode="after")
    def _kind_keys(self) -> "ScalerSpec":
        workload = r"^(deployment|statefulset)/.+"
        bad = [f"{k}: {v}" for k, v in self.profile_resources.items() if not re.match(workload, v)]
        if bad:
            raise ValueError(f"profile_resources must be deployment/NAME or statefulset/NAME; got {bad}")
        if self.kind == "kubernetes" and not self.profile_resources and not (
                self.resource and re.match(workload, self.resource)):
            raise ValueError("kubernetes scaler needs resource: deployment/NAME or statefulset/NAME "
                             "(or profile_resources: one per profile)")
        if self.kind == "webhook" and not (self.url and self.url.startswith(("http://", "https://"))):
            raise ValueError("webhook scaler needs url: http(s)://...")
        return self


class SignalSpec(Strict):
    source: Literal["scrape", "prometheus"] = "scrape"
    prometheus_url: str | None = None
    # PromQL label selector that picks this deployment's series, e.g. 'model_name="llama"'
    selector: str = ""
    # where arrivals (the stored load) come from: the instances' counters (read through
    # ``source``), or a gateway's access log that `warmcast ingest --follow` tails
    arrivals: Literal["counters", "access_log"] = "counters"
    access_log: str | None = None  # JSON-lines access log (arrivals: access_log)

    @model_validator(mode="after")
    def _url_for_prometheus(self) -> "SignalSpec":
        if self.source == "prometheus" and not self.prometheus_url:
            raise ValueError("source prometheus needs prometheus_url (e.g. http://prometheus:9090)")
        if self.arrivals == "access_log" and not self.access_log:
            raise ValueError("arrivals access_log needs access_log: the gateway's JSON-lines log path")
        return self


class RouteSpec(Strict):
    """Traffic routed by weight: a Gateway API HTTPRoute whose backendRefs name one Service per profile
    (as Argo Rollouts and Flagger shift a canary).  A switch's canary then gets its ``canary_share`` by
    weight; without a route, round robin gives it its share of the ready replicas (issue 42)."""
    httproute: str = Field(..., min_length=1, max_length=253)
    namespace: str | None = None       # default: the scaler's namespace
    backends: dict[str, str]           # profile -> the Service its pods are behind


class PolicyKnobs(Strict):
    """The policy's knobs for one deployment: the set the nightly re-tune and bench/fleet_slo.py search
    (issue 42).  A key left out keeps the core's default, or the re-tune's answer once one is stored;
    ``warmcast deployments show D`` prints each knob's value and the layer it comes from."""
    quantile: float | None = Field(None, ge=min(DEFAULT_QUANTILES), le=max(DEFAULT_QUANTILES),
                                   description="forecast level provisioned for (within the levels stored)")
    buffer_level: float | None = Field(None, gt=0, le=1, description="level of recent errors the warm buffer covers")
    target_utilisation: float | None = Field(None, gt=0, le=1.5)
    reactive_utilisation: float | None = Field(None, gt=0, le=1.5)
    stabilisation_s: float | None = Field(None, ge=0, le=86400)
    reactive_guard: float | None = Field(None, gt=0, le=1.5, description="the replaced HPA's target utilisation: "
                                         "never fewer replicas than it would hold")
    reactive_guard_window_min: int | None = Field(None, ge=1, le=1440)

    def set_values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Deployment(Strict):
    name: str
    model: str = "dummy"
    gpus_per_replica: int = Field(1, ge=0, le=64)
    min_replicas: int = Field(1, ge=0, le=MAX_INSTANCES)
    max_replicas: int = Field(8, ge=1, le=MAX_INSTANCES)
    cold_start_min: float = Field(15.0, ge=0, le=240, description="measured minutes from launch to ready")
    scaler: ScalerSpec = Field(default_factory=ScalerSpec)
    instances: list[str] = Field(default_factory=list, description="static instance base URLs")
    api_token_env: str | None = None  # env var with the bearer token the instances expect
    signals: SignalSpec = Field(default_factory=SignalSpec)
    default_profile: str = "day"
    profiles: dict[str, Profile]
    schedule: Schedule = Field(default_factory=Schedule)
    slo: SLO = Field(default_factory=SLO)  # what 'on time' means for this deployment (warmcast/config/slo.py)
    sleep: SleepTier | None = None  # the asleep tier: wake time and cost (warmcast/config/sleep_tier.py)
    gpu: GpuSpec | None = None  # GPU types and memory need, for capacity plans by type
    pools: PoolsSpec | None = None  # hot and cold pools under shared limits
    alerts: AlertSpec = Field(default_factory=AlertSpec)  # tiered alert responses (warmcast/config/alerts.py)
    policy: PolicyKnobs = Field(default_factory=PolicyKnobs)  # the policy's knobs (re-tuned nightly unless set)
    route: RouteSpec | None = None  # a weighted route for switches (else round robin over ready replicas)
    node_pool: str | None = None  # the node pool its instances run on (node_pools:, issue 45)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError(f"must be {NAME_RULE}")
        if v.endswith((".hot", ".cold")):  # `warmcast pools ingest` stores DEPLOYMENT.hot/.cold: never a deployment
            raise ValueError(f"{v!r} ends in .hot or .cold, which name a deployment's pool series "
                             "(`warmcast pools ingest` writes them); choose another name")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Deployment":
        check_against(self.pools, self.gpu, self.profiles)
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} > max_replicas {self.max_replicas}")
        if self.default_profile not in self.profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not one of profiles {sorted(self.profiles)}")
        pr = self.scaler.profile_resources
        if pr and set(pr) != set(self.profiles):
            raise ValueError(f"scaler.profile_resources names {sorted(pr)}; it needs exactly the profiles "
                             f"{sorted(self.profiles)}")
        mix = self.schedule.mix_trigger
        if mix is not None and mix.profile not in self.profiles:
            raise ValueError(f"schedule.mix_trigger profile {mix.profile!r} is not one of profiles {sorted(self.profiles)}")
        for i, w in enumerate(self.schedule.windows):
            if w.profile not in self.profiles:
                raise ValueError(f"schedule.windows[{i}].profile {w.profile!r} is not one of profiles "
                                 f"{sorted(self.profiles)}")
        if self.route is not None and set(self.route.backends) != set(self.profiles):
            raise ValueError(f"route.backends names {sorted(self.route.backends)}; it needs exactly the profiles "
                             f"{sorted(self.profiles)}")
        if self.alerts.failover is not None:
            try:
                ScalerSpec.model_validate(self.alerts.failover.scaler)
            except ValidationError as err:
                raise ValueError("alerts.failover.scaler: " + "; ".join(e["msg"] for e in err.errors())) from None
        return self

    @property
    def capacity_rpm(self) -> float:
        return self.profiles[self.default_profile].capacity_rpm


class DeploymentsFile(Strict):
    deployments: list[Deployment]
    node_pools: list[NodePool] = Field(default_factory=list)  # GPU nodes shared by deployments (issue 45)

    @model_validator(mode="after")
    def _unique(self) -> "DeploymentsFile":
        names = [d.name for d in self.deployments]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"deployment names must be unique; repeated: {sorted(dup)}")
        check_fleet(self.node_pools, self.deployments)
        return self

    def get(self, name: str) -> Deployment:
        for d in self.deployments:
            if d.name == name:
                return d
        raise NotFoundError(f"unknown deployment {shown(name)}; known: {[d.name for d in self.deployments]}")


def _where(loc: tuple[Any, ...], raw: dict[str, Any]) -> str:
    """Turn a pydantic location into 'deployment NAME: key.path'."""
    if len(loc) >= 2 and loc[0] == "deployments" and isinstance(loc[1], int):
        try:
            name = raw["deployments"][loc[1]].get("name", f"#{loc[1]}")
        except (IndexError, AttributeError, KeyError, TypeError):
            name = f"#{loc[1]}"
        if not (isinstance(name, str) and NAME_RE.fullmatch(name)):  # an invalid name is input: shown cut
            name = shown(name)
        rest = ".".join(str(p) for p in loc[2:]) or "(whole entry)"
        return f"deployment {name}: {rest}"
    return ".".join(str(p) for p in loc) or "(file)"


def parse_deployments(raw: Any, source: str = "deployments file") -> DeploymentsFile:
    if not isinstance(raw, dict) or "deployments" not in raw:
        raise InputError(f"{source}: expected a mapping with a 'deployments:' list")
    try:
        dfile = DeploymentsFile.model_validate(raw)
    except ValidationError as err:
        # each message cut to MESSAGE_CHARS: a validator that echoes a 10,000-character value must not
        # make the error that long (issue 41)
        msgs = [f"{_where(tuple(e['loc']), raw)}: {clip(e['msg'], MESSAGE_CHARS)}" for e in err.errors()]
        raise InputError(f"{source}: " + "; ".join(msgs)) from None
    check_profiles_engine_args(dfile, source)
    return dfile


def check_profiles_engine_args(dfile: DeploymentsFile, source: str) -> str:
    """Check every profile's engine_args against vLLM's parser (see warmcast.config.engine_args);
    raise InputError naming deployment, profile, arg, value and what is accepted.
    Returns what they were checked against."""
    from warmcast.config.engine_args import check_engine_args, load_constraints

    constraints = load_constraints()
    msgs = [f"deployment {d.name}: profile {name}: engine_args.{problem}"
            for d in dfile.deployments for name, profile in d.profiles.items()
            for problem in check_engine_args(profile.engine_args, constraints)]
    if msgs:
        raise InputError(f"{source}: " + "; ".join(msgs) + f" (checked against {constraints.origin})")
    return constraints.origin


def load_deployments(path: str | Path) -> DeploymentsFile:
    p = Path(path)
    return parse_deployments(read_yaml(p, f"deployments file {p} does not exist (set WARMCAST_DEPLOYMENTS_FILE)"), str(p))


def demo_deployment(name: str = "demo") -> Deployment:
    """The deployment the quickstart and the tests use when no file is given."""
    return Deployment(
        name=name,
        cold_start_min=15,
        min_replicas=1,
        max_replicas=40,
        profiles={
            "day": Profile(capacity_rpm=300, capacity_tokens_per_s=25000,
                           engine_args={"max-num-seqs": 16, "block-size": 16}),
            "night": Profile(capacity_rpm=200, capacity_tokens_per_s=30000,
                             engine_args={"max-num-seqs": 8, "block-size": 32}),
        },
        schedule=Schedule(windows=[ScheduleWindow(profile="night", start=time(22, 0), end=time(7, 0))]),
    )
