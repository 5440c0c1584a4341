"""The GPU catalogue (``warmup/planning/gpus.yaml``, extensible by a user file) and the GPU options
of a deployment: the edge that reads files and turns a deployment into core values.

Capacity per type, first found wins:
1. calibration: a measured requests/min per type passed in by the caller (no calibration
   store exists yet; :func:`deployment_options` takes ``calibrated`` so one can plug in);
2. declared: ``gpu.capacity_rpm`` in the deployments file (for the default profile; another
   profile scales it by its own capacity_rpm);
3. the profile's ``capacity_rpm`` on the ``gpu.reference`` type it was measured on;
4. estimated from the reference by memory bandwidth, labelled as an estimate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warmcast.config.deployments import Deployment
from warmcast.errors import InputError
from warmcast.config.yamlfile import read_yaml
from warmup.planning.gpus import Capacity, GpuOption, GpuType, build_options, estimated_capacity

SHIPPED = Path(__file__).resolve().parent / "gpus.yaml"
_FIELDS = ("memory_gb", "tflops_fp16", "bandwidth_gbs", "cost_index")


def _parse(raw: Any, source: str) -> dict[str, GpuType]:
    if not isinstance(raw, dict) or not isinstance(raw.get("gpus"), dict):
        raise InputError(f"{source}: expected a mapping with a 'gpus:' mapping of type name -> fields")
    out = {}
    for name, spec in raw["gpus"].items():
        if not isinstance(spec, dict) or set(spec) != set(_FIELDS):
            raise InputError(f"{source}: gpus.{name}: needs exactly the keys {list(_FIELDS)}")
        try:
            vals = {k: float(spec[k]) for k in _FIELDS}
        except (TypeError, ValueError):
            raise InputError(f"{source}: gpus.{name}: every field must be a number") from None
        bad = [k for k, v in vals.items() if not v > 0]
        if bad:
            raise InputError(f"{source}: gpus.{name}.{bad[0]}: must be > 0")
        out[str(name)] = GpuType(str(name), **vals)
    return out


def load_catalogue(extra: str | Path | None = None) -> dict[str, GpuType]:
    """The shipped types, then the user's file on top (same name = override)."""
    types = _parse(yaml.safe_load(SHIPPED.read_text()), str(SHIPPED))
    if extra is not None:
        p = Path(extra)
        types.update(_parse(read_yaml(p, f"GPU catalogue {p} does not exist"), str(p)))
    return types


def profile_context(dep: Deployment, profile: str) -> int:
    """The context a profile must hold: its vLLM max-model-len, else the deployment's gpu.context_tokens."""
    args = dep.profiles[profile].engine_args
    value = args.get("max-model-len", args.get("max_model_len"))
    if value is None:
        return dep.gpu.context_tokens if dep.gpu else 8192
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputError(f"deployment {dep.name}: profiles.{profile}.engine_args.max-model-len: "
                         f"not an integer: {value!r}") from None


def capacities(dep: Deployment, types: dict[str, GpuType], profile: str,
               calibrated: dict[str, float] | None = None) -> dict[str, Capacity]:
    spec = dep.gpu
    ref_rpm = dep.profiles[profile].capacity_rpm
    out: dict[str, Capacity] = {}
    for name, gpu in types.items():
        if calibrated and name in calibrated:
            out[name] = Capacity(calibrated[name], "calibration")
        elif spec and name in spec.capacity_rpm:
            scale = ref_rpm / dep.capacity_rpm  # declared for default_profile; other profiles scale with theirs
            out[name] = Capacity(spec.capacity_rpm[name] * scale, "declared" if profile == dep.default_profile
                                 else f"declared for {dep.default_profile}, scaled to {profile}")
        elif name == (spec.reference if spec else "A100-80G"):
            out[name] = Capacity(ref_rpm, f"profile {profile} (measured on {name})")
        elif spec and spec.reference in types:
            out[name] = Capacity(estimated_capacity(types[spec.reference], ref_rpm, gpu),
                                 f"estimated from {spec.reference} by memory bandwidth")
    return out


def deployment_options(dep: Deployment, profile: str | None = None, catalogue: str | Path | None = None,
                       calibrated: dict[str, float] | None = None) -> tuple[list[GpuOption], dict[str, str]]:
    """GPU options for one profile of a deployment, and the types left out with the reason."""
    if dep.gpu is None:
        raise InputError(f"deployment {dep.name}: no 'gpu:' section (model_memory_gb, types, capacity_rpm); "
                         "add one to plan by GPU type")
    profile = profile or dep.default_profile
    if profile not in dep.profiles:
        raise InputError(f"deployment {dep.name}: unknown profile {profile!r}; known: {sorted(dep.profiles)}")
    types = load_catalogue(catalogue or dep.gpu.catalogue)
    unknown = [t for t in [*dep.gpu.types, *dep.gpu.capacity_rpm, *dep.gpu.max_instances] if t not in types]
    if unknown:
        raise InputError(f"deployment {dep.name}: gpu: unknown GPU type(s) {sorted(set(unknown))}; "
                         f"catalogue has {sorted(types)}")
    allowed = {n: types[n] for n in (dep.gpu.types or list(types))}
    return build_options(list(allowed.values()), capacities(dep, types, profile, calibrated), dep.gpu.model_memory_gb,
                         profile_context(dep, profile), dep.gpu.gpus_per_instance, dep.gpu.max_instances)
