"""The fleet model's per-instance readings (warmup/sim/meter.py), counted by the live scrape's own
code (warmup/actuators/arrivals.py): every minute's arrivals counted exactly, through a growing
backlog, instances joining and leaving, and vLLM's rule that a finished counter only grows."""
import random

import pytest

from warmup.actuators.arrivals import InstanceReading, by_minute, count
from warmup.sim.fleet import serve_minute
from warmup.sim.meter import Meter, MinuteTrace, fill, ready_ids


def _minutes(ready_by_minute: list[int], capacity_rpm: float = 20.0, seed: int = 1) -> list[MinuteTrace]:
    """Minutes of the fluid model (10 s steps) served by the given ready counts."""
    rng, q, out = random.Random(seed), 0.0, []
    for t, ready in enumerate(ready_by_minute):
        steps = [rng.uniform(0.0, 50.0) for _ in range(6)]
        trail: list = []
        q0 = q
        q, _, _ = serve_minute(q, steps, ready * capacity_rpm / 60.0, 10.0, 5.0, trail)
        out.append(MinuteTrace(t, q0, tuple(steps), tuple(trail), (("", ready),)))
    return out


def test_the_scrape_counts_every_minute_exactly_through_joins_leaves_and_a_backlog():
    # 3 instances, then 5 (two join while the backlog grows), then 2 (three leave with requests waiting)
    traces = _minutes([3] * 10 + [5] * 10 + [2] * 10)
    assert traces[-1].queue[-1] > 100   # the backlog the readings must carry grew
    meter, carry, prev_ts, counted = Meter(), None, None, {}
    last_finished: dict[str, float] = {}
    for tr in traces:
        for ts, readings in meter.rounds(tr, tr.t * 60.0):
            assert tr.t * 60.0 < ts <= tr.t * 60.0 + 60.0 or ts == tr.t == 0
            assert sum(r["waiting"] for r in readings.values()) <= max(tr.q0, *tr.queue) + 1e-9
            for i, r in readings.items():   # a vLLM counter only grows while the instance lives
                assert r["finished"] >= last_finished.get(i, 0.0) - 1e-9, (i, ts)
            last_finished = {i: r["finished"] for i, r in readings.items()}
            c = count(carry, {i: InstanceReading(ts, **r) for i, r in readings.items()})
            assert {s.reason for s in c.spans} <= {"counted", "joined"}
            for m, n in by_minute(c.spans, prev_ts or ts).items():
                counted[m] = counted.get(m, 0.0) + n
            carry, prev_ts = c.carry, ts
    # the first round, at the first minute's start, only sets the baseline (as live, a scrape before)
    for tr in traces:
        assert counted[tr.t] == pytest.approx(sum(tr.arrivals)), tr.t


def test_rounds_inside_a_step_move_linearly_and_end_on_the_minute():
    tr = MinuteTrace(0, 0.0, (60.0,), (30.0,), (("day", 2),))   # one step of a minute-resolution log
    rounds = Meter(read=True).rounds(tr, 600.0, every_s=20.0)
    assert [ts for ts, _ in rounds] == [620.0, 640.0, 660.0]
    assert list(rounds[0][1]) == ["day-r0", "day-r1"] == ready_ids((("day", 2),))
    waiting = [sum(r["waiting"] for r in readings.values()) for _, readings in rounds]
    finished = [sum(r["finished"] for r in readings.values()) for _, readings in rounds]
    assert waiting == pytest.approx([10.0, 20.0, 30.0]) and finished == pytest.approx([10.0, 20.0, 30.0])


def test_fill_spreads_equally_under_each_cap_and_leaves_out_what_does_not_fit():
    assert fill(9.0, {"a": 1.0, "b": 10.0, "c": 10.0}) == {"a": 1.0, "b": 4.0, "c": 4.0}
    assert sum(fill(50.0, {"a": 1.0, "b": 2.0}).values()) == pytest.approx(3.0)
    assert fill(0.0, {"a": 1.0}) == {"a": 0.0}
