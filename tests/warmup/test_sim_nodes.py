"""The node layer of the fleet simulator (issue 45, warmup/sim/nodes.py and nodes_run.py): two cold
starts (instance lead on a free GPU, node lead plus instance lead otherwise), nodes paid whole,
max_nodes respected, idle nodes removed after the scale-down window, and preemptible fill that
gives a warm GPU back to an interactive launch within its instance lead."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warmup.sim.nodes import NodeParams, Nodes
from warmup.sim.nodes_run import FixedBalloons, Member, run_nodes

POOL = NodeParams(gpus_per_node=8, node_lead_min=10, max_nodes=4)


@dataclass
class Script:
    """A policy that asks for a given count from a given minute on."""

    base: int
    at: int
    then: int
    name: str = "script"

    def decide(self, obs) -> int:
        return self.then if obs.t >= self.at else self.base


def member(policy, minutes: int = 40, rpm: float = 0.0, gpus: int = 1, ready: int = 1) -> Member:
    return Member("d", policy, np.full((minutes, 1), rpm), capacity_rpm=100.0, gpus=gpus, instance_lead_min=3,
                  initial_ready=ready)


def ready_minute(run, name: str = "d", count: int = 2) -> int:
    return int(np.argmax(run.runs[name].ready >= count))


def test_an_instance_on_a_free_gpu_starts_in_its_instance_lead_else_after_a_node_lead_too():
    warm = run_nodes([member(Script(1, 5, 2))], POOL, FixedBalloons(1))        # a warm GPU waits
    assert ready_minute(warm) == 5 + 3
    cold = run_nodes([member(Script(1, 5, 9))], POOL)                            # 8 more: a node is needed
    assert ready_minute(cold, count=8) == 5 + 3                                 # 7 free GPUs on the first node
    assert ready_minute(cold, count=9) == 5 + 10 + 3                            # the 9th waits for a node


def test_nodes_are_paid_whole_while_up_or_booting():
    run = run_nodes([member(Script(1, 0, 1), minutes=60)], POOL)
    assert run.pool.gpu_hours() == 8.0                                           # one node of 8 GPUs for an hour


def test_the_pool_never_exceeds_max_nodes_and_counts_what_did_not_fit():
    run = run_nodes([member(Script(1, 2, 40))], POOL, FixedBalloons(100))
    assert run.nodes.max() <= POOL.max_nodes
    assert run.runs["d"].provisioned.max() == 32                                 # 4 nodes x 8 GPUs
    assert run.pool.unplaced == (40 - 32) * (40 - 2)                             # 8 refused each minute from 2


def test_an_idle_node_is_removed_after_the_scale_down_window():
    run = run_nodes([member(Script(12, 5, 1, "drop"), ready=12)], POOL)
    assert run.nodes[0] == 2
    assert run.nodes[5 + POOL.scale_down_min - 1] == 2 and run.nodes[5 + POOL.scale_down_min + 1] == 1


def test_preemptible_fill_serves_batch_on_warm_gpus_and_gives_them_back_within_the_instance_lead():
    run = run_nodes([member(Script(1, 20, 5))], POOL, FixedBalloons(6), fill=True)
    assert ready_minute(run, count=5) == 20 + 3                                  # batch preempted, instance lead only
    assert run.pool.preemptions == 4
    assert run.pool.batch_gpu_hours() > 0.5                                      # 6-7 free GPUs for 40 min
    lost = run_nodes([member(Script(1, 20, 5))], POOL, FixedBalloons(6), fill=False)
    assert lost.pool.batch_gpu_hours() == 0.0
    assert np.array_equal(lost.runs["d"].ready, run.runs["d"].ready)            # fill never delays an instance


def test_a_booting_node_takes_several_waiting_instances():
    pool = Nodes(POOL, up=1, held=8)
    at = pool.place(1, 3, t=0, instance_lead_min=3)
    assert at == [13, 13, 13] and pool.node_launches == 1 and pool.waiting == 3
    pool.settle(10)
    assert pool.up == 2 and pool.waiting == 0 and pool.held == 11
