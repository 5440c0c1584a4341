"""Issue 44: a process's rolling copy of the stored load answers exactly as the store does, and reads
from Redis only the days a write touched since it last read them."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.live import serving_history
from warmcast.errors import NotFoundError
from warmcast.history import HistoryCache
from warmcast.resolution import with_resolution
from warmcast.store import LoadStore


def minutes(start: str, n: int, seed: int = 0, step: int = 1) -> pd.DataFrame:
    idx = pd.date_range(start, periods=n, freq=f"{step}min", name="time")
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"requests": rng.poisson(50, n).astype(float),
                         "input_tokens": rng.poisson(5000, n).astype(float)}, index=idx)


def same(cache: HistoryCache, store: LoadStore, dep: str, start=None) -> None:
    got, want = cache.frame(dep, start), store.frame(dep, start)
    pd.testing.assert_frame_equal(got, want)
    assert got.attrs == want.attrs


def test_the_cache_answers_as_the_store_and_rereads_only_changed_days(store):
    store.upsert_frame("d", minutes("2025-01-01", 9 * 1440 - 30))
    cache = HistoryCache(store)
    same(cache, store, "d")
    assert cache.days_read == 9
    same(cache, store, "d", "2025-01-03 12:00")
    assert cache.days_read == 9   # nothing changed: nothing read again
    # the live loop: one new minute a time, only those minutes of today read again (its log says which)
    for i in range(3):
        store.upsert_frame("d", minutes(f"2025-01-09 23:{30 + i}", 1, seed=i))
        same(cache, store, "d", "2025-01-03")
    assert cache.days_read == 9 and cache.minutes_read == 3
    # a correction to an old day is seen (its revision moved), and a new day is read
    store.upsert_frame("d", minutes("2025-01-02 05:00", 10, seed=9))
    store.upsert_frame("d", minutes("2025-01-10 00:00", 5, seed=8))
    same(cache, store, "d")
    assert cache.days_read == 9 + 2


def test_today_read_back_from_its_log_or_whole_where_the_log_cannot_say(store):
    """Today's minutes come back from its write log while the cache is at most LOG_KEEP writes behind,
    a signal first written today included; further behind, or a day written before the log existed,
    is read whole; either way the answer is the store's.  Retention and delete drop the logs."""
    from warmcast.store import LOG_KEEP

    store.upsert_frame("d", minutes("2025-05-01", 1440 + 600))
    cache = HistoryCache(store)
    same(cache, store, "d")
    assert cache.days_read == 2
    one = minutes("2025-05-02 10:00", 2, seed=3).assign(output_tokens=[7.0, 8.0])   # a new signal
    store.upsert_frame("d", one)
    same(cache, store, "d")
    assert cache.days_read == 2 and cache.minutes_read == 2
    for i in range(LOG_KEEP + 1):   # more writes than the log keeps: today read whole
        store.upsert_frame("d", minutes(str(pd.Timestamp("2025-05-02 11:00") + pd.Timedelta(minutes=i)), 1, seed=i))
    same(cache, store, "d")
    assert cache.days_read == 3
    store.upsert_frame("d", minutes("2025-05-02 12:59", 1, seed=4))
    store.r.delete(store._log_key("d", 20210))   # that write as if made before the log existed
    store.upsert_frame("d", minutes("2025-05-02 13:00", 1, seed=5))
    same(cache, store, "d")
    assert cache.days_read == 4 and cache.minutes_read == 2
    logs = lambda: store.r.keys(f"{store.prefix}:load:d:log:*")  # noqa: E731
    assert len(logs()) == 2
    store.delete("d")
    assert logs() == []


def test_retention_a_coarse_series_and_an_unknown_deployment(redis_client, key_prefix):
    store = LoadStore(redis_client, key_prefix, retention_days=3)
    coarse = minutes("2025-02-01", 3 * 144, step=10)
    store.upsert_frame("c", with_resolution(coarse, 10), resolution_min=10)
    cache = HistoryCache(store)
    same(cache, store, "c")
    assert cache.frame("c").attrs["resolution_min"] == 10
    store.upsert_frame("c", with_resolution(minutes("2025-02-04", 144, step=10), 10), resolution_min=10)
    same(cache, store, "c")   # retention dropped the oldest day: neither answers with it
    assert len(store.days("c")) == 3
    with pytest.raises(NotFoundError):
        cache.frame("nobody")


def test_the_serving_window_is_the_same_with_and_without_the_cache_minute_after_minute(store):
    store.upsert_frame("d", minutes("2025-03-01", 8 * 1440 - 3))
    cache = HistoryCache(store)
    for i in range(70):   # across the top of an hour: the window's start moves
        t = pd.Timestamp("2025-03-08 23:57") + pd.Timedelta(minutes=i)
        store.upsert_frame("d", minutes(str(t), 1, seed=i))
        a, b = serving_history(store, "d", 7, cache=cache), serving_history(store, "d", 7)
        pd.testing.assert_frame_equal(a, b)
    assert cache.days_read <= 9 + 70 + 2   # the days first read, then today's each minute (and a new day's)


def test_a_bounded_cache_keeps_the_most_recently_read_deployments_and_still_answers_alike(store):
    for name in ("d1", "d2"):
        store.upsert_frame(name, minutes("2025-04-01", 2 * 1440, seed=len(name)))
    cache = HistoryCache(store, max_deployments=1)
    same(cache, store, "d1")
    same(cache, store, "d2")      # d1 dropped to keep the bound
    assert cache.days_read == 4
    same(cache, store, "d1")      # read again, whole
    assert cache.days_read == 6


def test_the_serving_window_is_built_once_until_a_write_and_each_caller_gets_its_own_copy(store):
    """The forecast step reads a deployment's window twice a minute (its shard's batched prime, then
    its own step): the second read builds nothing; a write, and only a write, changes the answer."""
    store.upsert_frame("d", minutes("2025-03-01", 3 * 1440 - 7))
    cache = HistoryCache(store)
    first = cache.serving("d", 2)
    first.iloc[-1, 0] = -1.0      # a caller changing its copy
    again = cache.serving("d", 2)
    assert cache._served["d"][1] is not again and again.iloc[-1, 0] != -1.0
    pd.testing.assert_frame_equal(again, serving_history(store, "d", 2))
    built = cache._served["d"][1]
    assert cache.serving("d", 2) is not built and cache._served["d"][1] is built   # nothing written: kept
    store.upsert_frame("d", minutes("2025-03-03 23:53", 1, seed=5))
    pd.testing.assert_frame_equal(cache.serving("d", 2), serving_history(store, "d", 2))
    assert cache._served["d"][1] is not built
    assert cache.serving("d", 1).index[0] > built.index[0]   # another window is built for itself
