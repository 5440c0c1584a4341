"""Issue 41 finding 2: ``GET /v1/deployments/{d}/shadow`` answered 500 for ``since=`` empty, ``-1`` or
``NaN`` and ``until=`` ``-1`` or ``NaN`` (a NaT went on into the report).  Each is a 422 located at the
query parameter, naming what is wrong; nothing is computed."""
from __future__ import annotations

import pytest

URL = "/v1/deployments/chat-llama/shadow"


@pytest.mark.parametrize("param, raw, says", [
    ("since", "", "empty"), ("since", "-1", "before 1970"), ("since", "NaN", "not a time"),
    ("since", "nat", "not a time"), ("since", "yesterday-ish", "not a time"),
    ("until", "-1", "before 1970"), ("until", "NaN", "not a time"), ("until", "", "empty"),
])
def test_a_bad_shadow_window_is_422_at_its_query_parameter(example_client, param, raw, says):
    params = {"since": "2024-05-01", "until": "2024-05-02", param: raw}
    r = example_client.get(URL, params=params)
    assert r.status_code == 422, (r.status_code, r.text)
    (err,) = r.json()["detail"]
    assert err["loc"] == ["query", param], err
    assert says in err["msg"] and repr(raw) in err["msg"], err


def test_a_window_ending_before_it_starts_is_422_at_since(example_client):
    r = example_client.get(URL, params={"since": "2024-05-03", "until": "2024-05-02"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", "since"]
