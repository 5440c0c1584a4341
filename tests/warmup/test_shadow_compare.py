"""The shadow comparison's own rules (warmup/sim/shadow.py), on records written by hand: which
minute a record describes, the ready count that serves it, the claims with their audit ids, and
the refusals (no records, a gap, a missing reading) that name what is missing."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from warmcast.errors import InputError
from warmup.sim.fleet import FleetParams
from warmup.sim.shadow import Fleet, actual_late, compare, limits, minutes_from

SINCE, UNTIL = datetime(2024, 5, 15, 6, 0), datetime(2024, 5, 15, 6, 10)


def rec(minute: int, arrivals: float, ready: int, provisioned: int, desired: int = 3, **kw) -> dict:
    return {"minute": f"2024-05-15 06:{minute:02d}", "arrivals": arrivals, "ready": ready, "provisioned": provisioned,
            "desired": desired, "audit_id": f"1-{minute}", "queue_depth": 0.0, "p99_s": None, **kw}


def test_a_minute_takes_its_arrivals_from_the_next_record_and_the_lower_ready_reading() -> None:
    recs = [rec(0, 50, 2, 2), rec(1, 100, 2, 3), rec(2, 200, 3, 3), rec(3, 150, 3, 2)]
    m = minutes_from(recs[::-1], "d", SINCE, UNTIL)   # order does not matter
    assert [t.minute for t in m.times] == [0, 1, 2]
    assert m.arrivals.tolist() == [100, 200, 150] and m.provisioned.tolist() == [3, 3, 2]
    assert m.ready.tolist() == [2, 2, 3]               # a boot finishing at 06:02 serves from 06:02
    assert m.audit_ids == ("1-0", "1-1", "1-2")


def test_claims_name_the_short_minutes_with_their_audit_ids() -> None:
    recs = [rec(i, a, r, r, desired=4) for i, (a, r) in enumerate([(0, 1), (250, 1), (250, 1), (90, 4), (90, 4)])]
    m = minutes_from(recs, "d", SINCE, UNTIL)
    params = FleetParams(capacity_rpm=100.0, cold_start_min=1)
    actual = Fleet(m.provisioned, m.ready, m.ready * 100.0, actual_late(m, params))
    wc_ready = np.array([3, 1, 1, 1])
    wc = Fleet(wc_ready, wc_ready, wc_ready * 100.0, np.zeros(4))
    out = compare(m, actual, wc)
    # 06:00: 250 arrivals on 1 ready, warmcast's 3 cover them; 06:01: both short
    assert out["short_actual_covered_by_warmcast"]["minutes"] == 1 and out["short_both"] == 1
    assert out["short_actual_covered_by_warmcast"]["shown"][0]["audit_id"] == "1-0"
    assert out["short_warmcast_covered_by_actual"]["minutes"] == 0
    assert out["actual"]["late_requests"] > 0 and out["instance_hours_saved"] == round((10 - 6) / 60, 3)   # provisioned 1+1+4+4 against 3+1+1+1
    assert any("2024-05-15 06:00..2024-05-15 06:03" in x for x in limits(
        m, SINCE, UNTIL, forecaster="f", capacity_rpm=100, capacity_source="declared", wait_s=5))


def test_no_records_gaps_and_missing_readings_are_refused_by_name() -> None:
    with pytest.raises(InputError, match="no shadow records for deployment 'd' between 2024-05-15 06:00"):
        minutes_from([], "d", SINCE, UNTIL)
    with pytest.raises(InputError, match=r"2 minute\(s\) missing \(2024-05-15 06:01..06:02\)"):
        minutes_from([rec(0, 1, 1, 1), rec(3, 1, 1, 1), rec(4, 1, 1, 1)], "d", SINCE, UNTIL)
    with pytest.raises(InputError, match=r"arrivals missing at 1 tick\(s\) \(2024-05-15 06:02\)"):
        minutes_from([rec(0, 1, 1, 1), rec(1, 1, 1, 1), rec(2, None, 1, 1)], "d", SINCE, UNTIL)
    # the first record's arrivals are the minute before the window's: not needed
    assert len(minutes_from([rec(0, None, 1, None), rec(1, 5, 1, 1)], "d", SINCE, UNTIL).times) == 1
