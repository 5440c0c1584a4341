"""The profile advisor's edges: stored minutes in, a deployments-file fragment and a plot out.

The decisions are ``warmup.planning.advisor`` (windows) and ``warmup.planning.advisor_args`` (engine
args, schedule); this module reads the load store, vLLM's recorded constraints and the measured
cold start, and renders what they return.  Shared by ``warmcast advise profiles`` and the API.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd
from warmcast.config.deployments import Deployment
from warmcast.errors import InputError
from warmup.planning.advisor import MinuteStat, Windows, find_windows, hhmm
from warmup.planning.advisor_args import InstanceSpec, Proposal, propose
from warmup.planning.advisor_render import render_fragment

CTX_SIGNALS = ("requests", "ctx_mean", "ctx_p50", "ctx_p95", "output_tokens")


class NoTokenCounts(InputError):
    """The stored minutes carry no prompt-token counts: the advisor has nothing to read."""


@dataclass(frozen=True)
class Advice:
    deployment: str
    windows: Windows
    proposal: Proposal
    spec: InstanceSpec
    fragment: str

    def as_doc(self) -> dict[str, Any]:
        """The advice as JSON for the API."""
        return {"deployment": self.deployment, "timezone": self.windows.tz_name,
                "windows": [{"profile": p.name, "start": hhmm(p.window.start_min), "end": hhmm(p.window.end_min),
                             "requests": p.window.requests, "ctx_mean": _num(p.window.ctx_mean),
                             "ctx_p50": _num(p.window.ctx_p50), "ctx_p95": _num(p.window.ctx_p95),
                             "engine_args": p.args.engine_args, "swap_gb": p.args.swap_gb,
                             "reasons": list(p.args.reasons)} for p in self.proposal.profiles],
                "default_profile": self.proposal.default_profile,
                "prewarm": [{"profile": n, "from": hhmm(m)} for n, m in self.proposal.prewarm],
                "cold_start_min": self.proposal.cold_start_min,
                "reasons": list(self.windows.reasons + self.proposal.reasons),
                "hourly_ctx_mean": [_num(v) for v in self.windows.hourly_mean],
                "fragment": self.fragment}


def _num(v: float) -> float | None:
    return round(float(v), 1) if v is not None and math.isfinite(v) else None


def minute_stats(frame: pd.DataFrame) -> tuple[MinuteStat, ...]:
    """The stored frame's minutes with requests and a mean context, as the core's input."""
    if "ctx_mean" not in frame or "requests" not in frame:
        return ()
    keep = frame[frame["ctx_mean"].notna() & (frame["requests"] > 0)]
    times = keep.index.tz_localize("UTC").to_pydatetime()
    nan = [math.nan] * len(keep)
    p50 = keep["ctx_p50"].tolist() if "ctx_p50" in keep else nan
    p95 = keep["ctx_p95"].tolist() if "ctx_p95" in keep else nan
    return tuple(MinuteStat(t, float(r), float(m), float(a), float(b))
                 for t, r, m, a, b in zip(times, keep["requests"].tolist(), keep["ctx_mean"].tolist(), p50, p95))


def instance_spec(dep: Deployment, frame: pd.DataFrame, memory_gb: float | None, weights_gb: float | None,
                  kv_bytes_per_token: float) -> InstanceSpec:
    """What one instance has: flags first, then the deployment's gpu: section, then an 80 GB GPU
    with 16 GB of weights (an 8B model in 16 bit); block sizes from the installed vLLM."""
    from warmcast.config.engine_args import accepted_block_sizes, load_constraints

    c = load_constraints()
    sizes, names = accepted_block_sizes(c, None)
    if memory_gb is None and dep.gpu is not None:
        from warmup.planning.gpu_catalogue import load_catalogue

        cat = load_catalogue(dep.gpu.catalogue)
        ref = dep.gpu.reference
        memory_gb = cat[ref].memory_gb * dep.gpu.gpus_per_instance if ref in cat else None
    mem, weights = memory_gb or 80.0, weights_gb or 16.0
    if weights >= mem:  # the field named first: the API answers 422 at that query parameter
        raise InputError(f"weights_gb: {weights:g} GB of model weights leave no room for the KV cache in "
                         f"{mem:g} GB of accelerator memory per instance; give the instance's memory "
                         "(memory_gb, or the deployment's gpu: section) or the model's real weight size")
    out = float(frame["output_tokens"].sum() / frame["requests"].sum()) \
        if {"output_tokens", "requests"} <= set(frame) and frame["requests"].sum() > 0 else 512.0
    return InstanceSpec(memory_gb=mem, weights_gb=weights,
                        kv_bytes_per_token=kv_bytes_per_token, output_tokens=out if math.isfinite(out) else 512.0,
                        accepted_block_sizes=tuple(sizes), block_sizes_from=f"{names} of vLLM {c.version}",
                        has_swap_space="swap-space" in c.options, vllm_version=c.version)


def cold_start(redis: Any, prefix: str, dep: Deployment) -> tuple[float, str]:
    """The lead the loop would use: measured launches, else the measure-coldstart record, else YAML."""
    from warmup.actuators.coldstart import resolve_lead

    lead = resolve_lead(redis, prefix, dep)
    return lead.cold_start_min, lead.source


def advise(store: Any, dep: Deployment, now: datetime, *, memory_gb: float | None = None,
           weights_gb: float | None = None, kv_bytes_per_token: float = 131072.0) -> Advice:
    """Read the stored minutes, decide, and render; NoTokenCounts when no minute has a context."""
    frame = store.frame(dep.name, end=pd.Timestamp(now).tz_convert("UTC").tz_localize(None))
    tz = ZoneInfo(dep.schedule.timezone)
    windows = find_windows(minute_stats(frame), now, tz)
    if not windows.has_tokens:
        raise NoTokenCounts(f"deployment {dep.name}: the stored minutes carry no prompt-token counts "
                            "(ingest a log with an input-token column, e.g. ContextTokens or input_length); "
                            "the advisor cannot see context length")
    spec = instance_spec(dep, frame, memory_gb, weights_gb, kv_bytes_per_token)
    lead, source = cold_start(store.r, store.prefix, dep)
    proposal = propose(windows.windows, spec, lead, source)
    return Advice(dep.name, windows, proposal, spec, render_fragment(dep, windows, proposal, spec, now))


def deployment_or_bare(fleet: Any, name: str) -> Deployment:
    """The deployment of that name in the deployments file, else a bare one (the store may hold
    a log ingested without a deployments file): one placeholder profile to replace."""
    from warmcast.config.deployments import Profile, check_deployment_name

    for d in fleet.deployments:
        if d.name == name:
            return d
    return Deployment(name=check_deployment_name(name), profiles={"day": Profile(capacity_rpm=60)})
