"""Requests attributed to pools by a log field or a rule, stored as one series per pool (real Redis)."""
from __future__ import annotations

import pandas as pd
import pytest

from warmcast.errors import InputError
from warmcast.ingest.pool_split import store_pool_series
from warmcast.config.pools import Attribution, AttributionRule

RULE = Attribution(field="pool", rules=[AttributionRule(pool="cold", api_keys=["batch-etl"]),
                                        AttributionRule(pool="cold", min_prompt_tokens=3000)], default="hot")


def _log(tmp_path, rows):
    p = tmp_path / "log.csv"
    pd.DataFrame(rows, columns=["timestamp", "input_tokens", "output_tokens", "pool", "api_key"]).to_csv(p, index=False)
    return p


def test_field_then_rules_then_default(tmp_path, store):
    p = _log(tmp_path, [
        ("2024-01-01 00:00:05", 100, 10, "", "k1"),          # default: hot
        ("2024-01-01 00:00:30", 5000, 10, "", "k1"),         # long prompt: cold
        ("2024-01-01 00:00:50", 100, 10, "", "batch-etl"),   # API key: cold
        ("2024-01-01 00:02:10", 9000, 10, "hot", "k1"),      # the log field wins over the rule
        ("2024-01-01 00:02:20", 100, 5, "COLD", "k1"),
    ])
    counts = store_pool_series(store, "chat", p, RULE)
    assert counts == {"hot": 2, "cold": 3}
    hot, cold = store.series("chat.hot"), store.series("chat.cold")
    assert hot.to_dict() == {pd.Timestamp("2024-01-01 00:00"): 1.0, pd.Timestamp("2024-01-01 00:01"): 0.0,
                             pd.Timestamp("2024-01-01 00:02"): 1.0}
    assert cold.tolist() == [2.0, 0.0, 1.0]  # the quiet minute in the span is an observed zero
    assert store.series("chat.cold", "input_tokens").iloc[0] == 5100
    # re-storing the same log changes nothing (the store upserts)
    store_pool_series(store, "chat", p, RULE)
    assert store.series("chat.cold").tolist() == [2.0, 0.0, 1.0]


def test_a_bad_pool_name_or_time_names_the_row_and_column(tmp_path, store):
    p = _log(tmp_path, [("2024-01-01 00:00:05", 100, 10, "warm", "k1")])
    with pytest.raises(InputError, match="row 1: column 'pool': 'warm' is not a pool"):
        store_pool_series(store, "chat", p, RULE)
    p = _log(tmp_path, [("2024-01-01 00:00:05", 100, 10, "", "k1"), ("yesterday", 1, 1, "", "k1")])
    with pytest.raises(InputError, match=r"log.csv:3: column 'timestamp': not a time"):
        store_pool_series(store, "chat", p, RULE)
    assert store.deployments() == []  # nothing stored on a bad log
