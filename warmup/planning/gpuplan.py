"""Capacity plan by GPU type: the cheapest mix of allowed GPU types per slot that meets the SLO.

Pure: a demand series (requests/min per slot, e.g. per hour at the planning quantile)
and the GPU options come in; per slot the mix, its cost-index total and the limit that
bound it go out.  The SLO in capacity terms: the mix's capacity at the target
utilisation covers the slot's demand.  Cost = cost index x GPUs x hours; the saving is
against the same demand served by A100-80G only within the same limits (max_replicas, max_gpus, the
type's availability): a baseline free of them made a capped plan read as a saving (issue 46).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warmup.planning.gpus import GpuOption

BASELINE_TYPE = "A100-80G"
_EPS = 1e-9


@dataclass(frozen=True)
class MixRequest:
    demand_rpm: tuple[float, ...]      # per slot, at the planning quantile
    labels: tuple[str, ...]            # slot start times, as text
    options: tuple[GpuOption, ...]
    utilisation: float = 0.8           # SLO as target utilisation of an instance
    slot_hours: float = 1.0
    max_gpus: int | None = None        # all types together, per slot
    growth: float = 1.0                # what-if: demand multiplier ("+30%" = 1.3)
    max_instances: int | None = None   # all types together, per slot: the deployment's max_replicas


@dataclass(frozen=True)
class SlotPlan:
    label: str
    demand_rpm: float
    counts: dict[str, int]
    capacity_rpm: float                # at the target utilisation
    cost: float
    gpus: int
    bound: str                         # what decided the mix: "slo", "no demand", a limit name
    reason: str


@dataclass(frozen=True)
class GpuPlan:
    slots: list[SlotPlan]
    slot_hours: float
    baseline_cost: float | None = None  # all-A100 for the same demand, within the same limits
    baseline_short: int = 0             # slots where that all-A100 fleet misses the SLO (a limit binds)
    same_as_baseline: bool = False      # the plan is that all-A100 fleet in every slot: nothing saved

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.slots)

    @property
    def gpu_hours(self) -> float:
        return sum(s.gpus for s in self.slots) * self.slot_hours

    @property
    def saving(self) -> float | None:
        """Share of the all-A100 cost saved (0.25 = 25% cheaper; negative: the plan costs more, as where the
        baseline misses the SLO in slots the plan meets); 0 when the plan is the baseline."""
        if not self.baseline_cost:
            return None
        return 0.0 if self.same_as_baseline else 1.0 - self.cost / self.baseline_cost


@dataclass(frozen=True)
class _Mix:
    counts: tuple[int, ...]
    cost: float
    gpus: int
    capacity: float


def slot_peaks(per_minute: list[float], minutes_per_slot: int = 60) -> list[float]:
    """Per-slot demand from a per-minute series: the busiest minute of each slot (NaN ignored)."""
    out = []
    for i in range(0, len(per_minute), minutes_per_slot):
        vals = [v for v in per_minute[i:i + minutes_per_slot] if v == v]
        out.append(max(vals) if vals else 0.0)
    return out


def _limits_of(opt: GpuOption, budget_gpus: int | None) -> int | None:
    caps = [c for c in (opt.max_instances,
                        None if budget_gpus is None else budget_gpus // max(opt.gpus_per_instance, 1)) if c is not None]
    return min(caps) if caps else None


def cheapest_mix(demand: float, options: tuple[GpuOption, ...], utilisation: float,
                 max_gpus: int | None, limited: bool = True, max_instances: int | None = None) -> _Mix | None:
    """Exact search for the lowest-cost counts whose capacity at ``utilisation`` covers ``demand``.

    Options are tried cheapest per request first; a branch stops once its cost plus the
    cheapest possible cover of what is left cannot beat the best found.  None: infeasible."""
    order = sorted(range(len(options)), key=lambda i: options[i].cost_per_instance_hour / options[i].capacity_rpm)
    eff = [options[i].capacity_rpm * utilisation for i in order]
    unit = [options[i].cost_per_instance_hour for i in order]
    gpus = [options[i].gpus_per_instance for i in order]
    rate = [u / e for u, e in zip(unit, eff)]
    best: list[_Mix | None] = [None]

    def walk(k: int, left: float, counts: list[int], cost: float, used: int) -> bool:
        """Search below this node; True when pruned because it cannot beat the incumbent."""
        incumbent = best[0]
        if left <= _EPS:
            if incumbent is None or (cost, used) < (incumbent.cost - _EPS, incumbent.gpus):
                full = [0] * len(options)
                for j, c in zip(order, counts + [0] * (len(order) - len(counts))):
                    full[j] = c
                best[0] = _Mix(tuple(full), cost, used, sum(c * e for c, e in zip(counts, eff)))
            return False
        if k == len(order):
            return False
        if incumbent is not None and cost + left * min(rate[k:]) >= incumbent.cost - _EPS:
            return True
        room = None if max_gpus is None or not limited else (max_gpus - used) // max(gpus[k], 1)
        cap = options[order[k]].max_instances if limited else None
        fleet = None if max_instances is None or not limited else max_instances - sum(counts)
        top = math.ceil(left / eff[k] - _EPS)
        top = min(x for x in (top, room, cap, fleet) if x is not None)
        for n in range(top, -1, -1):  # many of the cheapest first: finds a good incumbent early
            # fewer of this type only raises the bound (the rest costs at least as much per request)
            if walk(k + 1, max(left - n * eff[k], 0.0), counts + [n], cost + n * unit[k], used + n * gpus[k]):
                break
        return False

    walk(0, demand, [], 0.0, 0)
    return best[0]


def _most_capacity(options: tuple[GpuOption, ...], utilisation: float, max_gpus: int | None,
                   max_instances: int | None = None) -> _Mix:
    """When no mix within the limits meets demand: every allowed instance, cheapest per request first
    (largest first when the fleet's instance count is what runs out)."""
    counts = [0] * len(options)
    left, fleet = max_gpus, max_instances
    # short of instances, the biggest come first (each slot of the fleet should carry the most); else the cheapest
    key = ((lambda j: -options[j].capacity_rpm) if fleet is not None
           else (lambda j: options[j].cost_per_instance_hour / options[j].capacity_rpm))
    for i in sorted(range(len(options)), key=key):
        o = options[i]
        n = _limits_of(o, left)
        if fleet is not None:
            n = fleet if n is None else min(n, fleet)
        if n is None:  # unbounded type: cannot happen when infeasible
            continue
        counts[i] = n
        left = None if left is None else left - n * o.gpus_per_instance
        fleet = None if fleet is None else fleet - n
    return _mix_of(counts, options, utilisation)


def _mix_of(counts: list[int] | tuple[int, ...], options: tuple[GpuOption, ...], utilisation: float) -> _Mix:
    return _Mix(tuple(counts), sum(c * o.cost_per_instance_hour for c, o in zip(counts, options)),
                sum(c * o.gpus_per_instance for c, o in zip(counts, options)),
                sum(c * o.capacity_rpm * utilisation for c, o in zip(counts, options)))


def _binding(demand: float, mix: _Mix, req: MixRequest) -> str:
    """The limits that, lifted one at a time, would give a cheaper (or a feasible) mix."""
    tight = []
    for i, o in enumerate(req.options):
        if o.max_instances is not None:
            opts = req.options[:i] + (replace(o, max_instances=None),) + req.options[i + 1:]
            alt = cheapest_mix(demand, opts, req.utilisation, req.max_gpus, max_instances=req.max_instances)
            if alt is not None and alt.cost < mix.cost - _EPS:
                tight.append(f"max_instances of {o.gpu.name}")
    if req.max_gpus is not None:
        alt = cheapest_mix(demand, req.options, req.utilisation, None, max_instances=req.max_instances)
        if alt is not None and alt.cost < mix.cost - _EPS:
            tight.append("max_gpus")
    if req.max_instances is not None:
        alt = cheapest_mix(demand, req.options, req.utilisation, req.max_gpus)
        if alt is not None and alt.cost < mix.cost - _EPS:
            tight.append(f"max_replicas ({req.max_instances})")
    return ", ".join(tight) or "limits together"


def plan_slot(label: str, demand: float, req: MixRequest) -> SlotPlan:
    """One slot's mix and the reason: the SLO alone, or which limit changed it."""
    names = [o.gpu.name for o in req.options]
    if demand <= _EPS:
        return SlotPlan(label, demand, dict.fromkeys(names, 0), 0.0, 0.0, 0, "no demand", "no demand: no instances")
    free = cheapest_mix(demand, req.options, req.utilisation, req.max_gpus, limited=False)
    mix = cheapest_mix(demand, req.options, req.utilisation, req.max_gpus, max_instances=req.max_instances)
    if mix is None:
        mix = _most_capacity(req.options, req.utilisation, req.max_gpus, req.max_instances)
        bound = _binding(demand, _Mix(mix.counts, math.inf, mix.gpus, mix.capacity), req)
        why = f"SLO NOT MET: demand {demand:.0f} rpm > {mix.capacity:.0f} rpm allowed by {bound}"
    elif free is not None and mix.cost > free.cost + _EPS:
        bound = _binding(demand, mix, req)
        why = f"cheapest mix within {bound}; without it {free.cost * req.slot_hours:.2f} instead"
    else:
        bound = "slo"
        why = f"cheapest mix covering {demand:.0f} rpm at {req.utilisation:.0%} utilisation"
    counts = dict(zip(names, mix.counts))
    return SlotPlan(label, demand, counts, mix.capacity, mix.cost * req.slot_hours, mix.gpus, bound, why)


def plan_gpu_mix(req: MixRequest) -> GpuPlan:
    """The plan for every slot, with the all-A100 cost of the same demand for comparison."""
    if not req.options:
        raise ValueError("no GPU type is an option for this model (see the exclusions)")
    if not 0 < req.utilisation <= 1 or req.growth <= 0:
        raise ValueError("utilisation must be in (0, 1] and growth > 0")
    demand = [max(d, 0.0) * req.growth for d in req.demand_rpm]
    slots = [plan_slot(lab, d, req) for lab, d in zip(req.labels, demand)]
    base = [o for o in req.options if o.gpu.name == BASELINE_TYPE]
    if not base:
        return GpuPlan(slots, req.slot_hours)
    counts, short = all_a100(demand, base[0], req)
    names = [o.gpu.name for o in req.options]
    same = all(s.counts == {n: (c if n == BASELINE_TYPE else 0) for n in names} for s, c in zip(slots, counts))
    cost = sum(counts) * base[0].cost_per_instance_hour * req.slot_hours
    return GpuPlan(slots, req.slot_hours, cost, short, same)


def all_a100(demand: list[float], a100: GpuOption, req: MixRequest) -> tuple[list[int], int]:
    """(A100 instances per slot, slots short of demand): the baseline the saving is against, held to
    the plan's own limits (its availability, the GPU budget, max_replicas)."""
    per = a100.capacity_rpm * req.utilisation
    cap = _limits_of(a100, req.max_gpus)
    if req.max_instances is not None:
        cap = req.max_instances if cap is None else min(cap, req.max_instances)
    need = [math.ceil(d / per - _EPS) if d > _EPS else 0 for d in demand]
    counts = need if cap is None else [min(n, cap) for n in need]
    return counts, sum(c < n for c, n in zip(counts, need))


def what_if(req: MixRequest, types: tuple[str, ...] | None = None, utilisation: float | None = None,
            growth: float | None = None) -> tuple[GpuPlan, GpuPlan]:
    """The plan as asked and the plan under a change: fewer types, another SLO, more traffic."""
    variant = req
    if types is not None:
        unknown = set(types) - {o.gpu.name for o in req.options}
        if unknown:
            raise ValueError(f"what-if types {sorted(unknown)} are not options here: "
                             f"{[o.gpu.name for o in req.options]}")
        variant = replace(variant, options=tuple(o for o in req.options if o.gpu.name in types))
    if utilisation is not None:
        variant = replace(variant, utilisation=utilisation)
    if growth is not None:
        variant = replace(variant, growth=growth)
    return plan_gpu_mix(req), plan_gpu_mix(variant)
