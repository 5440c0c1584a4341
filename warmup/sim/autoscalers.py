"""The reactive baselines, as the real autoscalers behave by their documentation (issue 26).

``reactive`` is the Kubernetes HorizontalPodAutoscaler (autoscaling/v2) on a request-rate metric
with an ``AverageValue`` target of ``capacity_rpm * target_utilisation`` per pod; ``queue`` is KEDA
with a Prometheus trigger on ``vllm:num_requests_waiting`` (``AverageValue`` ``target_waiting`` per
replica), which KEDA hands to an HPA of its own. Both scale through the HPA's rules:

- a sync every 15 s (``--horizontal-pod-autoscaler-sync-period``);
- no change while the usage ratio ``metric / (target * replicas)`` is within 10% of 1
  (``--horizontal-pod-autoscaler-tolerance``);
- scale-up limited per 15 s period to the larger of +100% and +4 pods (the default ``scaleUp``
  policies, ``selectPolicy: Max``) with no stabilisation window;
- scale-down to the highest recommendation of the last 300 s (the default ``scaleDown``
  stabilisation window; its rate policy, 100% per 15 s, never binds).

KEDA adds, for a ScaledObject whose ``minReplicaCount`` is 0, activation from zero at its first
poll that sees the queue above the activation threshold (0), scaling to zero after
``cooldownPeriod`` (300 s) without activity, and ``maxReplicaCount`` 100 unless set lower.
A trigger on the waiting queue alone asks for no replicas while nothing waits: the fleet falls to
its minimum once the window has passed, and rises again only after a backlog has formed. Its ``pollingInterval`` (30 s) is finer than the
simulator's minute, so each minute's decision reads the queue at the minute's start.

The HPA seeds its scale-down window with the count it starts from (Kubernetes'
``recordInitialRecommendation``), so neither baseline scales down in its first window.  Where one
replica at ``min_replicas`` cannot carry the load, a waiting-only trigger cycles by this rule alone:
minimum, a backlog, up to ``maxReplicaCount`` within two minutes, the cold start, the backlog drained,
the 5-minute window, minimum again.  Its period is the cold start plus the window, not the trace's
shape, so two traces of one length that both overload a single replica give the same counts: that is
KEDA on ``vllm:num_requests_waiting`` alone, not a simulator artefact (issue 46).

The simulator decides once a minute: the four syncs of a minute see the same metric, so the
minute's scale-up limit is the 15 s limit applied four times (2 pods can become 48 in a minute).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from warmup.core import hpa, replicas_for
from warmup.core.hpa import TOLERANCE
from warmup.sim.fleet import Observation

KEDA_MAX_REPLICAS = 100   # a ScaledObject's maxReplicaCount when it sets none (the fleet's bound when lower)


@dataclass
class HPARules:
    """The HPA's scaling rules (defaults from the Kubernetes documentation), once a minute: the
    decision core's own functions (``warmup.core.hpa``, which its reactive guard follows)."""

    tolerance: float = TOLERANCE
    up_percent: float = 100.0
    up_pods: int = 4
    down_window_min: int = 5          # scaleDown.stabilizationWindowSeconds 300
    min_replicas: int = 1
    max_replicas: int = 10_000
    _recent: tuple[int, ...] = field(default=(), repr=False)
    _started: bool = field(default=False, repr=False)

    def recommend(self, current: int, metric: float, per_pod_target: float) -> int:
        """The replicas the metric asks for; the current count while within the tolerance."""
        return hpa.recommend(current, metric, per_pod_target, self.tolerance)

    def scale(self, current: int, recommendation: int) -> int:
        """One minute of syncs: up at most +100%/+4 pods per 15 s; down to the window's highest (the
        window starts with the count the HPA started from, as Kubernetes seeds it)."""
        rec = hpa.seeded(recommendation, current, self._started)
        self._started = True
        n, self._recent = hpa.scale(current, rec, self._recent, self.down_window_min, self.min_replicas,
                                    self.max_replicas, self.up_percent, self.up_pods)
        return n


@dataclass
class ReactiveHPA:
    """The HPA on the last minute's request rate, ``target_utilisation`` of capacity per pod."""

    capacity_rpm: float
    target_utilisation: float = 0.8
    stabilisation_min: int = 5
    min_replicas: int = 1
    max_replicas: int = 10_000
    name: str = "reactive"
    _rules: HPARules | None = field(default=None, repr=False)

    def recommend(self, obs: Observation) -> int:
        """Replicas for the last minute's load at the target (the fleet it would start from)."""
        load = obs.last_minute_rpm if math.isfinite(obs.last_minute_rpm) else 0.0
        return replicas_for(load, self.capacity_rpm, self.target_utilisation)

    def decide(self, obs: Observation) -> int:
        if self._rules is None:
            self._rules = HPARules(down_window_min=self.stabilisation_min, min_replicas=self.min_replicas,
                                   max_replicas=self.max_replicas)
        load = obs.last_minute_rpm if math.isfinite(obs.last_minute_rpm) else 0.0
        rec = self._rules.recommend(obs.provisioned, load, self.capacity_rpm * self.target_utilisation)
        return self._rules.scale(obs.provisioned, rec)


@dataclass
class QueueKEDA:
    """KEDA on the waiting queue: ``target_waiting`` requests per replica through the HPA's rules;
    with ``min_replicas`` 0, activation from zero and scale to zero after ``cooldown_min``."""

    capacity_rpm: float
    target_waiting: float = 5.0
    stabilisation_min: int = 5
    cooldown_min: int = 5             # cooldownPeriod 300 s (scale to zero only)
    min_replicas: int = 1
    max_replicas: int = 10_000
    name: str = "queue"
    _idle_for: int = 0
    _rules: HPARules | None = field(default=None, repr=False)

    def decide(self, obs: Observation) -> int:
        if self._rules is None:
            self._rules = HPARules(down_window_min=self.stabilisation_min, min_replicas=max(1, self.min_replicas),
                                   max_replicas=self.max_replicas)
        queue = max(0.0, obs.queue_depth)
        self._idle_for = self._idle_for + 1 if queue <= 0 else 0
        if obs.provisioned == 0:  # KEDA's activation: the HPA does not scale from zero
            return self._rules.scale(0, max(1, self._rules.recommend(0, queue, self.target_waiting))) if queue > 0 else 0
        if self.min_replicas == 0 and self._idle_for >= self.cooldown_min:
            return 0
        return self._rules.scale(obs.provisioned, self._rules.recommend(obs.provisioned, queue, self.target_waiting))
