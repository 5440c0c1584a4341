"""The resolution claim is made in the same transaction as the write (issue 31): two first ingests
of one new deployment at different resolutions, released together, store one series, never both."""
from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import redis

from warmcast.errors import InputError
from warmcast.store import LoadStore

ROUNDS = 60


def _series(start: pd.Timestamp, minutes: int, value: float) -> pd.DataFrame:
    idx = pd.date_range(start, periods=24 * 60 // minutes, freq=f"{minutes}min", name="time")
    return pd.DataFrame({"requests": np.full(len(idx), value)}, index=idx)


def _race(url: str, prefix: str, dep: str, start: pd.Timestamp) -> dict[int, object]:
    """Both writers' outcomes (bins written, or the error), keyed by resolution."""
    barrier, outcomes = threading.Barrier(2), {}

    def write(minutes: int) -> None:
        client = redis.Redis.from_url(url)  # one connection each, as two processes would have
        store = LoadStore(client, prefix)
        frame = _series(start, minutes, float(minutes))
        barrier.wait()
        try:
            outcomes[minutes] = store.upsert_frame(dep, frame, resolution_min=minutes)
        except InputError as err:
            outcomes[minutes] = err
        finally:
            client.close()

    threads = [threading.Thread(target=write, args=(m,)) for m in (5, 10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return outcomes


def test_concurrent_first_ingests_at_two_resolutions_store_exactly_one(redis_server_url, redis_client, key_prefix):
    start = (pd.Timestamp.now("UTC").tz_localize(None) - pd.Timedelta(days=2)).floor("D")
    store = LoadStore(redis_client, key_prefix)
    for i in range(ROUNDS):
        dep = f"race{i}"
        outcomes = _race(redis_server_url, key_prefix, dep, start)
        won = [m for m, o in outcomes.items() if isinstance(o, int)]
        assert len(won) == 1, f"round {i}: both writes stored: {outcomes}, stored resolution {store.resolution(dep)}"
        winner, loser = won[0], 15 - won[0]
        err = outcomes[loser]
        assert isinstance(err, InputError) and f"stores {winner}-minute bins" in str(err) \
            and "nothing was stored" in str(err), err
        assert store.resolution(dep) == winner
        stored = store.frame(dep)["requests"].dropna()
        # only the winner's bins, with the winner's values: nothing of the loser's series was kept
        assert len(stored) == 24 * 60 // winner and (stored == float(winner)).all(), (i, winner, len(stored))
