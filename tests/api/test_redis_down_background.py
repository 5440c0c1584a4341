"""Issue 41 finding 4b: with Redis down, the API's log said "Task exception was never retrieved": the
stored forecast's background re-read (answered meanwhile from the copy a second old) failed and no
one looked at its error.  The failure is now one clear warning naming Redis, and the stale copy is
still answered.  A Redis of the test's own (the embedded redis-server) is stopped for real."""
from __future__ import annotations

import gc
import logging
import time

import redis
from fastapi.testclient import TestClient

from api_helpers import AUTH, WRITE, stored_forecast, synthetic_frame
from warmcast.config.settings import load_settings
from warmcast.runtime import start_embedded_redis
from warmcast.state import StateStore
from warmcast.store import LoadStore

URL = "/v1/deployments/demo/forecast"


def test_a_failed_background_read_is_one_warning_not_an_unretrieved_task(tmp_path, caplog):
    from api.app import create_app

    server = start_embedded_redis(tmp_path / "own-redis")
    try:
        r = redis.Redis.from_url(server.url)
        LoadStore(r, "t41").upsert_frame("demo", synthetic_frame())
        StateStore(r, "t41").put_forecast("demo", stored_forecast(), trained_at="2024-01-07 23:00:00")
        settings = load_settings(redis_url=server.url, key_prefix="t41", api_token=WRITE,
                                 state_dir=tmp_path / "state", models_dir=tmp_path / "models")
        with TestClient(create_app(settings)) as client:
            assert client.get(URL, headers=AUTH).status_code == 200
            server.stop()
            time.sleep(1.3)    # the copy is past RAW_TTL_S, within RAW_STALE_S: answered while a re-read runs
            with caplog.at_level(logging.WARNING):
                assert client.get(URL, headers=AUTH).status_code == 200
                time.sleep(1.0)   # the re-read fails (connection refused) and its task is dropped
                gc.collect()
    finally:
        server.stop()
    text = caplog.text
    assert "Task exception was never retrieved" not in text, text
    warned = [rec for rec in caplog.records if rec.levelno == logging.WARNING and "Redis" in rec.getMessage()]
    assert len(warned) == 1 and "demo" in warned[0].getMessage(), [rec.getMessage() for rec in caplog.records]
