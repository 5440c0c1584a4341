"""Shared live state: forecasts, audit trail, pause flag, fleet history round-trip through Redis."""
from __future__ import annotations

import numpy as np
import pandas as pd

from warmcast.forecast import Forecast
from warmcast.state import StateStore, forecast_from_dict


def test_forecast_audit_pause_and_fleet_roundtrip(redis_client, key_prefix):
    st = StateStore(redis_client, key_prefix)
    fc = Forecast(pd.Timestamp("2024-01-01 10:00"), np.arange(30.0),
                  {0.1: np.arange(30.0) - 1, 0.5: np.arange(30.0), 0.9: np.arange(30.0) + 1}, "lstm", "3")
    st.put_forecast("d", fc, trained_at="2024-01-01 00:00:00")
    back = forecast_from_dict(st.get_forecast("d"))
    assert back.origin == fc.origin and back.model == "lstm"
    np.testing.assert_allclose(back.quantile(0.9), fc.quantiles[0.9])
    st.audit("d", "scale", "scale_to 3", "forecast P90 needs 3", applied=False, inputs={"q": np.float64(1.5)},
             ts=pd.Timestamp("2024-01-01 10:00"))
    st.audit("d", "warmup", "none", "queue depth 2 below tier low (5)", applied=False,
             ts=pd.Timestamp("2024-01-01 10:01"))
    log = st.audit_log("d")
    assert [r["kind"] for r in log] == ["warmup", "scale"] and log[1]["inputs"] == {"q": 1.5}
    assert [r["kind"] for r in st.audit_log("d", kind="scale")] == ["scale"]
    assert st.audit_log("d", since="2024-01-01 10:01:00")[0]["kind"] == "warmup"
    assert len(st.audit_log("d", since="2024-01-01 10:01:00")) == 1
    st.set_paused("d", True, reason="maintenance")
    assert st.paused("d")["reason"] == "maintenance"
    st.set_paused("d", False)
    assert st.paused("d") is None
    st.request_profile("d", "night")
    assert st.take_profile_request("d")["profile"] == "night" and st.take_profile_request("d") is None
    for i in range(3):
        st.record_fleet("d", pd.Timestamp("2024-01-01 10:00") + pd.Timedelta(minutes=i), 2 + i, None if i == 0 else 2)
    hist = st.fleet_history("d")
    assert hist["desired"].tolist() == [2, 3, 4] and np.isnan(hist["actual"].iloc[0])


def test_dumps_writes_what_the_cleaning_walk_wrote_for_every_kind_of_value():
    """warmcast.state.dumps encodes with json's own encoder first and walks the document through
    _clean only where json refuses it (a non-finite number, a key json cannot take): the text is the
    walk's, byte for byte, for every kind of value the workers store."""
    import json
    from datetime import datetime, timezone

    import numpy as np
    import pandas as pd

    from warmcast.state import _clean, dumps

    docs = [
        {"a": 1, "b": 2.5, "c": [1, 2, (3, 4)], "d": None, "e": "x", "f": True},
        {"np": np.int64(7), "f32": np.float32(0.25), "f64": np.float64(0.1), "arr": np.array([1.5, 2.0])},
        {"ts": pd.Timestamp("2026-12-07 08:00:05"), "dt": datetime(2026, 12, 7, tzinfo=timezone.utc),
         "bool": np.bool_(True), "set": {1}},
        {"nan": float("nan"), "inf": [1.0, float("inf")], "deep": {"x": [np.float64("nan")]}},
        {0.9: [1.0], 3: "int key", "q": {np.float64(0.5): 1}},
        {(1, 2): "tuple key", "arr_nan": np.array([np.nan, 1.0])},
    ]
    for doc in docs:
        assert dumps(doc) == json.dumps(_clean(doc), separators=(",", ":"), default=str), doc
    assert dumps({"nan": float("nan")}) == '{"nan":null}'
