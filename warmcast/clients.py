"""Client series under a deployment (issue 43): one requests series per client (tenant, API key)
beside the deployment's own total, so that the fleet model learns from the clients' habits (a batch
client that starts at 02:00 every night is a rise no aggregate model sees coming) and a deployment's
forecast can be reconciled from its clients'.

Layout (``P`` the key prefix, ``D`` the deployment): each client's series is an ordinary load-store
series (:class:`warmcast.store.LoadStore`: the same transactions, the same one-resolution rule)
under the prefix ``P:clients:D``, named by a label; ``P:clients:D:names`` maps each label to the
client's own name.  A label is a deployment-safe name: the client's name where it is one, else
``c-`` and a hash of it (API keys hold any character).

Cardinality is bounded (``Settings.clients_max``, ``WARMCAST_CLIENTS_MAX``): a deployment keeps at
most ``bound - 1`` named clients and sums the rest into one series, ``other``.  Clients already
stored keep their series (a client's history is not cut in two by a later, busier newcomer); new
ones are admitted largest first while there is room.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from warmcast.config.deployments import NAME_RE, check_deployment_name
from warmcast.errors import InputError
from warmcast.resolution import with_resolution
from warmcast.store import LoadStore

OTHER = "other"          # the label (and name) of the series the clients past the bound are summed into
RESERVED = (OTHER, "total")  # "total" is the fleet panel's name for a deployment's own row


def label_for(name: str) -> str:
    """The store's label of client ``name``: the name where it is a safe, unreserved one, else a hash."""
    if NAME_RE.fullmatch(name) and name not in RESERVED and not name.startswith("c-"):
        return name
    return "c-" + hashlib.sha256(name.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Bounded:
    """Which clients keep a series of their own and which are summed into ``other``."""

    keep: tuple[str, ...]
    summed: tuple[str, ...]
    bound: int


def bound_clients(volumes: Mapping[str, float], stored: set[str], bound: int) -> Bounded:
    """The clients of one ingest under the bound: the stored ones keep theirs, then the largest new
    ones while fewer than ``bound - 1`` are named (one series is kept for ``other``)."""
    if bound < 2:
        raise InputError(f"the client bound must be at least 2 (one client and 'other'), not {bound}")
    room = max(0, bound - 1 - len(stored - {OTHER}))
    new = sorted((n for n in volumes if n not in stored and n != OTHER), key=lambda n: (-volumes[n], n))
    keep = [n for n in volumes if n in stored and n != OTHER] + new[:room]
    return Bounded(tuple(keep), tuple(n for n in new[room:]) + ((OTHER,) if OTHER in volumes else ()), bound)


@dataclass(frozen=True)
class ClientReport:
    deployment: str
    kept: int
    summed: int
    bound: int
    requests_in_other: float

    def summary(self) -> str:
        line = f"deployment {self.deployment}: {self.kept} client series stored"
        if self.summed:
            line += (f"; {self.summed:,} more clients summed into '{OTHER}' ({self.requests_in_other:,.0f} "
                     f"requests): a deployment keeps at most {self.bound} series (WARMCAST_CLIENTS_MAX)")
        return line


class ClientStore:
    """The client series of one deployment (see the module docstring)."""

    def __init__(self, store: LoadStore, deployment: str) -> None:
        self.deployment = check_deployment_name(deployment)
        self.sub = LoadStore(store.r, f"{store.prefix}:clients:{deployment}", store.retention_days)
        self._names_key = f"{store.prefix}:clients:{deployment}:names"

    def names(self) -> dict[str, str]:
        """label -> the client's own name, for every stored client series."""
        raw = self.sub.r.hgetall(self._names_key)
        return {_text(k): _text(v) for k, v in raw.items()}

    def frames(self, start: pd.Timestamp | None = None) -> dict[str, pd.DataFrame]:
        """label -> its stored series (requests) from ``start``; a label with nothing left is left out."""
        out = {}
        for label in sorted(self.sub.deployments()):
            f = self.sub.frame(label, start=start)
            if len(f):
                out[label] = f
        return out

    def check_resolution(self, minutes: int) -> None:
        """Refuse a series of ``minutes`` bins where this deployment's clients are stored at another."""
        for label in self.sub.deployments():
            stored = self.sub.resolution(label)
            if stored != minutes and self.sub.days(label):
                raise InputError(f"deployment {self.deployment!r} stores its client series in {stored}-minute "
                                 f"bins; this file has {minutes}-minute bins; nothing was stored")

    def write(self, series: Mapping[str, pd.Series], resolution_min: int, plan: Bounded) -> ClientReport:
        """Store each client's series (index: bin starts, values: requests) as ``plan`` bounded them:
        the clients it keeps under their own label, ``other`` holding the sum of the rest."""
        self.check_resolution(resolution_min)
        for name, s in series.items():
            label = OTHER if name == OTHER else label_for(name)
            frame = with_resolution(pd.DataFrame({"requests": s.astype(float)}), resolution_min)
            self.sub.upsert_frame(label, frame, resolution_min=resolution_min)
            self.sub.r.hset(self._names_key, label, name)
        other = float(np.nansum(series[OTHER].to_numpy())) if OTHER in series else 0.0
        return ClientReport(self.deployment, len(plan.keep), len([n for n in plan.summed if n != OTHER]),
                            plan.bound, other)

    def delete(self) -> None:
        for label in self.sub.deployments():
            self.sub.delete(label)
        self.sub.r.delete(self._names_key)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def bounded_rows(long: pd.DataFrame, deployment: str, grouped: bool, stored: set[str],
                 bound: int) -> tuple[pd.DataFrame, Bounded]:
    """One deployment's rows of a file's long table (``series``, ``time``, ``requests``, ``group``),
    each client past the bound renamed ``other``: the bound applies before anything is laid out per
    client, so 100,000 distinct clients cost their rows, not 100,000 series.  With a deployment
    column (``grouped``) the rows of ``deployment`` only (keys ``deployment/client``), refused by name
    when it has none."""
    rows = long
    if grouped:
        rows = long[long["group"] == deployment]
        if rows.empty:
            raise InputError(f"the file holds no rows for deployment {deployment!r} (its deployments: "
                             f"{', '.join(sorted(set(long['group']))[:10])}); nothing was stored")
        client = rows["series"].str.split("/", n=1).str[1]
    else:
        client = rows["series"]
    volumes = rows["requests"].groupby(client.to_numpy()).sum().to_dict()
    plan = bound_clients({str(k): float(v) for k, v in volumes.items()}, stored, bound)
    named = np.where(client.isin(set(plan.keep)).to_numpy(), client.to_numpy(), OTHER)
    return pd.DataFrame({"client": named, "time": rows["time"].to_numpy(), "requests": rows["requests"].to_numpy()}), plan


def per_client(rows: pd.DataFrame, step_min: int | None) -> tuple[pd.DatetimeIndex, int, dict[str, pd.Series]]:
    """(grid, minutes per bin, client -> its counts on the grid): a step a client has no row for
    inside the file's span had no requests (0), so the clients sum to the deployment.  ``step_min``
    None: the smallest gap between the table's times."""
    times = pd.DatetimeIndex(pd.to_datetime(rows["time"])).as_unit("ns")
    uniq = np.unique(times.asi8)
    if step_min is None:
        gaps = np.diff(uniq)
        step_min = max(1, int(gaps.min() // 60_000_000_000)) if len(gaps) else 1
    index = pd.date_range(pd.Timestamp(uniq[0]).floor(f"{step_min}min"), pd.Timestamp(uniq[-1]), freq=f"{step_min}min")
    col = index.get_indexer(times.floor(f"{step_min}min"))
    if (col < 0).any():
        raise InputError(f"a row's time does not fall on the file's {step_min}-minute grid; nothing was stored")
    out = {}
    for name, pos in pd.Series(np.arange(len(rows))).groupby(rows["client"].to_numpy()).groups.items():
        v = np.zeros(len(index))
        np.add.at(v, col[np.asarray(pos)], rows["requests"].to_numpy(dtype=float)[np.asarray(pos)])
        out[str(name)] = pd.Series(v, index=index)
    return index, step_min, out


def ingest_rows(store: LoadStore, deployment: str, long: pd.DataFrame, grouped: bool, step_min: int | None,
                bound: int) -> tuple[int, ClientReport]:
    """A file's rows stored as the deployment's total (the clients' sum) and its client series under
    the bound.  Every check comes before the first write: a refused file stores nothing."""
    clients = ClientStore(store, deployment)
    rows, plan = bounded_rows(long, deployment, grouped, set(clients.names().values()), bound)
    index, step, series = per_client(rows, step_min)
    stored = store.resolution(deployment)
    if stored != step and store.days(deployment):
        raise InputError(f"deployment {deployment!r} stores {stored}-minute bins; this file has {step}-minute "
                         "bins; nothing was stored")
    clients.check_resolution(step)
    total = with_resolution(pd.DataFrame({"requests": sum(series.values())}, index=index), step)
    n = store.upsert_frame(deployment, total, resolution_min=step)
    return n, clients.write(series, step, plan)


def shares_text(series: Mapping[str, pd.Series], top: int = 10) -> str:
    """One line: the client series and each one's share of their requests, busiest first."""
    totals = {n: float(np.nansum(s.to_numpy(dtype=float))) for n, s in series.items()}
    whole = sum(totals.values())
    if whole <= 0:
        return f"clients: {len(series)} series, no requests in the window"
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    parts = [f"{n} {v / whole:.0%}" for n, v in ranked[:top]]
    more = f", and {len(ranked) - top} more" if len(ranked) > top else ""
    return f"clients: {len(series)} series, share of requests: " + ", ".join(parts) + more
