"""The replay's instance ledger (warmup/sim/ledger.py): one id per instance from launch to removal,
followed over the fleet model's own pool through launches, readiness, scale-in and wakes."""
from __future__ import annotations

from warmup.sim.fleet import Pool
from warmup.sim.ledger import Ledger


def _look(lg: Ledger, pool: Pool, t: int, launched: float | None = None) -> None:
    pool.advance(t)
    lg.update(pool.ready, pool.booting, t, launched)


def test_an_instance_keeps_its_id_from_launch_to_ready_and_scale_in_cancels_the_newest_booting_first() -> None:
    pool, lg = Pool(ready=2), Ledger()
    _look(lg, pool, 0)
    assert lg.ready == ["i0", "i1"] and lg.booting == []
    pool.resize(5, 0, 3)                       # minute 0's decision: three launches, ready at minute 3
    _look(lg, pool, 1, launched=0.0)
    assert [b[0] for b in lg.booting] == ["i2", "i3", "i4"] and {b[2] for b in lg.booting} == {0.0}
    assert lg.position("i3") == "b1" and lg.position("i0") == "r0" and lg.position("s0") is None
    pool.resize(4, 1, 3)                       # minute 1: one fewer, the newest booting one goes
    _look(lg, pool, 2, launched=60.0)
    assert [b[0] for b in lg.booting] == ["i2", "i3"]
    pool.resize(6, 2, 3)                       # minute 2: two more (ready at 5)
    _look(lg, pool, 3, launched=120.0)         # i2, i3 ready now; the new two booting since 120 s
    assert lg.ready == ["i0", "i1", "i2", "i3"]
    assert [(b[0], b[1], b[2]) for b in lg.booting] == [("i5", 5, 120.0), ("i6", 5, 120.0)]


def test_a_scale_in_past_the_booting_ones_removes_ready_ones_and_a_wake_adds_unbooted_ids() -> None:
    pool, lg = Pool(ready=3), Ledger("day-")
    _look(lg, pool, 0)
    pool.resize(4, 0, 5)
    _look(lg, pool, 1, launched=0.0)
    pool.resize(2, 1, 5)                       # the booting one and one ready one go
    _look(lg, pool, 2, launched=60.0)
    assert lg.booting == [] and lg.ready == ["day-i0", "day-i1"]
    pool.ready += 1                            # woken from the asleep tier: ready without a boot
    _look(lg, pool, 3)
    assert lg.ready == ["day-i0", "day-i1", "day-i4"] and lg.position("day-i4") == "day-r0"


def test_instances_that_finish_booting_while_others_are_cancelled_are_read_in_launch_order() -> None:
    pool, lg = Pool(ready=0), Ledger()
    _look(lg, pool, 0)
    pool.resize(1, 0, 2)                       # ready at 2
    _look(lg, pool, 1, launched=0.0)
    pool.resize(3, 1, 2)                       # two more, ready at 3
    _look(lg, pool, 2, launched=60.0)
    assert lg.ready == ["i0"] and [b[0] for b in lg.booting] == ["i1", "i2"]
    pool.resize(2, 2, 2)                       # the newest booting one is cancelled
    _look(lg, pool, 3, launched=120.0)         # and the other is ready at 3
    assert lg.ready == ["i0", "i1"] and lg.booting == []
