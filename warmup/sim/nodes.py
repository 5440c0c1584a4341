"""GPU nodes shared by many deployments (issue 45): the node layer of the fleet simulator.

Two cold starts, core and simulator alike: an instance starts in its own instance lead on a free
GPU of a running node; where none is free it waits for a node (one already booting with room, else
a new one, ``node_lead_min``) and then its instance lead.  Nodes are paid whole while up or booting.
Each deployment's instances, queue and lateness are the fleet model's own (``warmup.sim.fleet``:
``boot_finished``, ``serve_minute``); this layer only decides *when* a launch is ready and what the
nodes cost.

Warm GPUs (balloons) are free GPUs the pool keeps on running nodes; the nodes for them are started
ahead.  With preemptible fill, every free GPU on a running node serves batch work until an
interactive launch takes it: the launch preempts the batch job (``preempt_s`` of its work lost)
and still starts in its instance lead, so preemption never makes an interactive request later.

Stated limits: GPUs are counted per pool, not per node (no fragmentation: an instance of 2 GPUs fits
wherever 2 GPUs are free); a node is removed once the pool's free GPUs beyond the warm target have
exceeded a whole node for ``scale_down_min`` minutes (the Cluster Autoscaler's
scale-down-unneeded-time, default 10 min); an instance that finds no GPU and no room for a node at
``max_nodes`` is not started (``unplaced`` counts such launches, again each minute a policy asks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeParams:
    gpus_per_node: int
    node_lead_min: float
    max_nodes: int
    scale_down_min: int = 10
    preempt_s: float = 30.0          # batch work lost when a warm GPU is taken back

    @property
    def node_minutes(self) -> int:
        return int(math.ceil(self.node_lead_min - 1e-9))


@dataclass
class Nodes:
    """One pool's nodes minute by minute: up, booting (their ready minutes), GPUs held by instances
    (running, booting, or waiting on a booting node) and the cost and fill counters."""

    p: NodeParams
    up: int = 0
    booting: list[int] = field(default_factory=list)
    held: int = 0                    # GPUs held by instances on running nodes
    waiting: int = 0                 # GPUs claimed on booting nodes
    unneeded_since: int | None = None
    node_minutes: float = 0.0        # node-minutes paid (up or booting)
    batch_gpu_minutes: float = 0.0
    preemptions: int = 0
    unplaced: int = 0
    node_launches: int = 0
    _ready_at: list[int] = field(default_factory=list)   # ready minute of each booting node, launch order

    # ------------------------------------------------------------ time
    def settle(self, t: int) -> None:
        """Booting nodes whose minute came are up; what instances claimed on them is held there now."""
        done = [m for m in self.booting if m <= t]
        if done:
            self.booting = [m for m in self.booting if m > t]
            self.up += len(done)
            moved = min(self.waiting, len(done) * self.p.gpus_per_node)
            self.waiting -= moved
            self.held += moved

    def free(self) -> int:
        return self.up * self.p.gpus_per_node - self.held

    # ------------------------------------------------------------ instances
    def place(self, gpus: int, n: int, t: int, instance_lead_min: int, batch: bool = False) -> list[int]:
        """Ready minutes of ``n`` instances of ``gpus`` GPUs launched at ``t``: a free GPU now (a batch
        job preempted when ``batch``), else room on a booting node, else a new node; none past max_nodes."""
        out = []
        for _ in range(n):
            if self.free() >= gpus:
                self.held += gpus
                self.preemptions += int(batch)
                out.append(t + instance_lead_min)
                continue
            at = self._on_booting_node(gpus)
            if at is None and self.up + len(self.booting) < self.p.max_nodes:
                self.booting.append(t + self.p.node_minutes)
                self.node_launches += 1
                at = self._on_booting_node(gpus)
            if at is None:
                self.unplaced += 1
                continue
            out.append(at + instance_lead_min)
        return out

    def _on_booting_node(self, gpus: int) -> int | None:
        """Claim ``gpus`` on booting nodes (the earliest that has room); its ready minute, or None."""
        room = len(self.booting) * self.p.gpus_per_node - self.waiting
        if room < gpus:
            return None
        self.waiting += gpus
        filled = math.ceil(self.waiting / self.p.gpus_per_node)   # nodes in ready order fill first
        return sorted(self.booting)[filled - 1]

    def release(self, gpus: int, n: int, waiting: int = 0) -> None:
        """``n`` instances of ``gpus`` GPUs removed, ``waiting`` of them still on a booting node."""
        self.waiting = max(0, self.waiting - waiting * gpus)
        self.held = max(0, self.held - (n - waiting) * gpus)

    # ------------------------------------------------------------ the pool's size
    def keep_warm(self, warm: int, t: int) -> None:
        """Start nodes so that ``warm`` GPUs are free once they are up (within max_nodes)."""
        need = self.held + self.waiting + warm
        have = (self.up + len(self.booting)) * self.p.gpus_per_node
        while have < need and self.up + len(self.booting) < self.p.max_nodes:
            self.booting.append(t + self.p.node_minutes)
            self.node_launches += 1
            have += self.p.gpus_per_node

    def scale_down(self, warm: int, t: int) -> None:
        """Remove whole empty nodes once the free GPUs beyond ``warm`` have exceeded a node for
        ``scale_down_min`` minutes (booting nodes nobody waits for go first)."""
        spare = (self.up + len(self.booting)) * self.p.gpus_per_node - self.held - self.waiting - warm
        extra = spare // self.p.gpus_per_node
        if extra <= 0:
            self.unneeded_since = None
            return
        if self.unneeded_since is None:
            self.unneeded_since = t
        if t - self.unneeded_since < self.p.scale_down_min:
            return
        unclaimed = len(self.booting) - math.ceil(self.waiting / self.p.gpus_per_node)
        cut = min(extra, unclaimed)
        if cut > 0:
            self.booting = sorted(self.booting)[:len(self.booting) - cut]
        self.up -= min(extra - cut, self.up)
        self.unneeded_since = None

    def account(self, fill: bool) -> None:
        """One minute's cost (every node up or booting) and, with preemptible fill, the batch work the
        free GPUs of running nodes serve."""
        self.node_minutes += self.up + len(self.booting)
        if fill:
            self.batch_gpu_minutes += max(0, self.free())

    def gpu_hours(self) -> float:
        return self.node_minutes * self.p.gpus_per_node / 60.0

    def batch_gpu_hours(self) -> float:
        return self.batch_gpu_minutes / 60.0 - self.preemptions * self.p.preempt_s / 3600.0
