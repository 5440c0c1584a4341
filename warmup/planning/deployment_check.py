"""What `warmcast deployments check` adds to loading a deployments file: the checks that need the
GPU catalogue (a file the loaders of the worker, beat and API never read), each a contradiction
that no demand can make right: an unknown GPU type, a profile no allowed type can hold, a pool
instance larger than the pools' memory budget or than its GPU fraction's memory, a minimum the
GPU limits cannot place, a full cold queue that no allowed fleet serves within its deadline.

Edge module: it reads the catalogue (shipped, plus the deployment's ``gpu.catalogue``).
"""
from __future__ import annotations

import math
from pathlib import Path

from warmcast.config.deployments import Deployment, DeploymentsFile, load_deployments
from warmcast.errors import InputError
from warmup.planning.gpu_catalogue import deployment_options, load_catalogue
from warmup.planning.gpus import GpuType
from warmup.planning.pools_plan import shapes


def unknown_types(dep: Deployment, types: dict[str, GpuType]) -> list[str]:
    """One problem per gpu key that names a type the catalogue does not hold."""
    spec = dep.gpu
    keys = {"types": spec.types, "capacity_rpm": list(spec.capacity_rpm), "max_instances": list(spec.max_instances),
            "reference": [spec.reference]}
    return [f"deployment {dep.name}: gpu.{key}: unknown GPU type(s) {sorted(set(bad))}; known: {sorted(types)}"
            + (f" (with {spec.catalogue})" if spec.catalogue else " (add a gpu.catalogue file to define more)")
            for key, names in keys.items() if (bad := [t for t in names if t not in types])]


def unservable_profiles(dep: Deployment) -> list[str]:
    """Profiles that no allowed GPU type can run (model too big at its context, or no capacity known)."""
    out = []
    for name in dep.profiles:
        options, left_out = deployment_options(dep, name)
        if not options:
            why = "; ".join(f"{t}: {r}" for t, r in left_out.items())
            out.append(f"deployment {dep.name}: profile {name}: no allowed GPU type can serve it ({why})")
    return out


def unplaceable_minimum(dep: Deployment, types: dict[str, GpuType]) -> list[str]:
    """min_replicas that the GPU limits cannot place: over max_gpus, or over every allowed type's
    max_instances together (only when each allowed type has one)."""
    spec, out = dep.gpu, []
    if spec.max_gpus is not None and dep.min_replicas * spec.gpus_per_instance > spec.max_gpus:
        out.append(f"deployment {dep.name}: min_replicas {dep.min_replicas} x gpu.gpus_per_instance "
                   f"{spec.gpus_per_instance} > gpu.max_gpus {spec.max_gpus}: the minimum cannot be placed")
    allowed = spec.types or list(types)
    if allowed and all(t in spec.max_instances for t in allowed):
        most = sum(spec.max_instances[t] for t in allowed)
        if dep.min_replicas > most:
            out.append(f"deployment {dep.name}: min_replicas {dep.min_replicas} > {most}, the gpu.max_instances of "
                       f"the allowed types {sorted(allowed)} together: the minimum cannot be placed")
    return out


def oversized_pools(dep: Deployment) -> list[str]:
    """Pools whose one instance needs more GPU memory than the pools' whole memory budget."""
    hot, cold, limits = shapes(dep)
    return [f"deployment {dep.name}: pools.{name}: one instance needs {shape.memory_gb:.1f} GB, over the memory "
            f"budget of {limits.memory_budget_gb:.1f} GB (limits.physical_gpus {limits.physical_gpus} x "
            f"{limits.gpu_memory_gb:g} GB x memory_share {limits.memory_share:g}): the pool can never run"
            for name, shape in (("hot", hot), ("cold", cold)) if shape.memory_gb > limits.memory_budget_gb]


def undersized_fractions(dep: Deployment) -> list[str]:
    """Pools whose instance asks for a fraction of a GPU (gpu_request) too small to hold its memory:
    the instances sharing a GPU could not fit on it together."""
    hot, cold, limits = shapes(dep)
    out = []
    for name, shape in (("hot", hot), ("cold", cold)):
        share = shape.gpu_request * limits.gpu_memory_gb
        if shape.memory_gb > share + 1e-9:
            out.append(f"deployment {dep.name}: pools.{name}: gpu_request {shape.gpu_request:g} gives an instance "
                       f"{share:g} GB of a {limits.gpu_memory_gb:g} GB GPU but it needs {shape.memory_gb:.1f} GB; "
                       f"raise gpu_request to at least {math.ceil(100 * shape.memory_gb / limits.gpu_memory_gb) / 100:g}")
    return out


def undrainable_cold_queue(dep: Deployment) -> list[str]:
    """A full cold queue needs more instances to be served within the deadline than the
    deployment's max_replicas, the cold pool's max_instances or the GPUs can ever give it."""
    spec = dep.pools.cold
    if spec.queue is None:
        return []
    _, cold, limits = shapes(dep)
    each = cold.capacity_rpm * cold.utilisation * spec.slo.deadline_min
    need = math.ceil(spec.queue / each - 1e-9)
    caps = {"max_replicas": dep.max_replicas,
            "the GPUs (limits.physical_gpus / pools.cold.gpu_request)": math.floor(
                limits.physical_gpus / cold.gpu_request + 1e-9)}
    if cold.max_instances is not None:
        caps["pools.cold.max_instances"] = cold.max_instances
    return [f"deployment {dep.name}: pools.cold: a full queue of {spec.queue} needs {need} instance(s) to be served "
            f"within slo.deadline_min {spec.slo.deadline_min:g} ({each:g} requests each), more than {key} {cap}"
            for key, cap in caps.items() if need > cap]


def deployment_problems(dep: Deployment) -> list[str]:
    """Every contradiction above for one deployment (empty when there is none)."""
    problems: list[str] = []
    if dep.gpu is not None:
        types = load_catalogue(dep.gpu.catalogue)
        unknown = unknown_types(dep, types)
        if unknown:  # the other checks read the catalogue by these names
            return unknown
        problems = unservable_profiles(dep) + unplaceable_minimum(dep, types)
    if dep.pools is not None:
        problems += oversized_pools(dep) + undersized_fractions(dep) + undrainable_cold_queue(dep)
    return problems


def checked_deployments(path: str | Path) -> DeploymentsFile:
    """The deployments file at ``path`` as `warmcast deployments check` accepts it: loaded (keys,
    values, schedules, engine_args) and then every deployment's contradictions above; raises
    InputError naming them.  The workers validate a changed file with this before they run it."""
    dfile = load_deployments(path)
    problems = [p for d in dfile.deployments for p in deployment_problems(d)]
    if problems:
        raise InputError(f"{path}: " + "; ".join(problems))
    return dfile
