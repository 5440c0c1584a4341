"""Node objects of a GPU node pool on Kubernetes (issue 45): how long its nodes took from creation to
Ready, for the pool's node lead (``warmup.core.lead.choose_node_lead``).

A node's creation is ``metadata.creationTimestamp``; its Ready moment is the ``lastTransitionTime``
of its ``Ready`` condition while that condition is ``True`` (a node that flapped since reads later:
the lead errs long, never short).  Nodes not Ready yet, or Ready before they were created (a clock
skew), are left out.  The pool's nodes are those with its label (``node_selector``, for example
``cloud.google.com/gke-nodepool=a100`` or ``karpenter.sh/nodepool=a100``).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from warmup.core.lead import Lead, choose_node_lead


def created_to_ready_s(nodes: Iterable[Any]) -> list[float]:
    """Creation-to-Ready seconds of the Ready nodes among ``nodes`` (V1Node objects), oldest first."""
    out: list[tuple[datetime, float]] = []
    for n in nodes:
        created = n.metadata.creation_timestamp
        ready = next((c for c in (n.status.conditions or []) if c.type == "Ready"), None) if n.status else None
        if created is None or ready is None or ready.status != "True" or ready.last_transition_time is None:
            continue
        took = (ready.last_transition_time - created).total_seconds()
        if took >= 0:
            out.append((created, took))
    return [s for _, s in sorted(out, key=lambda x: x[0])]


def node_lead(api_client: Any, node_selector: str, declared_min: float) -> Lead:
    """The pool's node lead from its node objects (CoreV1 ``list_node`` with ``node_selector``)."""
    from kubernetes import client, config

    if api_client is None:   # as the scalers do: in-cluster first, then ~/.kube/config
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api_client = client.ApiClient()
    nodes = client.CoreV1Api(api_client).list_node(label_selector=node_selector).items
    return choose_node_lead(created_to_ready_s(nodes), declared_min)
