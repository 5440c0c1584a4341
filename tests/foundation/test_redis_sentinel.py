"""Issue 31: ``sentinel://`` URLs for the store, the broker, the result backend and RedBeat.

Settings checks run without servers; the store test asks a real sentinel (tests/workers/sentinelrig.py)
which server is master and writes there.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import redis

from warmcast.runtime import wait_until
from warmcast.config.settings import SettingsError, load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
from sentinelrig import SentinelRig  # noqa: E402

TWO = "sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380/2"


@pytest.mark.parametrize("url, problem", [
    (TWO, r"no master name: add \?master_name=NAME to the URL or set redis_master_name \(WARMCAST_REDIS_MASTER_NAME\)"),
    ("sentinel://127.0.0.1:notaport?master_name=m", "the port must be a number"),
    ("sentinel://h1:26379;redis://h2:6379?master_name=m", "each sentinel must be written sentinel://host:port"),
    ("sentinel://h1:26379/0;sentinel://h2:26379/1?master_name=m", "give one number as the path"),
    ("sentinel://h1:26379?master_name=a;sentinel://h2:26379?master_name=b", "several master names"),
])
def test_bad_sentinel_url_is_refused_naming_the_key_and_the_fix(url, problem):
    with pytest.raises(SettingsError, match=r"redis_url \(WARMCAST_REDIS_URL.*" + problem):
        load_settings(redis_url=url)


def test_other_schemes_are_still_refused_and_the_message_lists_sentinel():
    with pytest.raises(SettingsError, match=r"must start with redis://, rediss://, unix:// or sentinel://"):
        load_settings(redis_url="http://127.0.0.1:6379")


def test_celery_and_redbeat_use_the_sentinels(tmp_path):
    from workers.app import celery_config
    from workers.options import WorkerOptions

    s = load_settings(redis_url=TWO, redis_master_name="wc", key_prefix="p", state_dir=tmp_path)
    conf = celery_config(s, WorkerOptions(simulate=True))
    kombu = "sentinel://127.0.0.1:26379/2;sentinel://127.0.0.1:26380/2"  # kombu's form, every host with the db
    assert conf["broker_url"] == conf["result_backend"] == kombu
    assert conf["broker_transport_options"]["master_name"] == "wc"
    assert conf["broker_transport_options"]["global_keyprefix"] == "p:celery:"
    assert conf["result_backend_transport_options"]["master_name"] == "wc"
    assert conf["redbeat_redis_url"].startswith("redis-sentinel")
    beat = conf["redbeat_redis_options"]
    assert beat["sentinels"] == [("127.0.0.1", 26379), ("127.0.0.1", 26380)]
    assert (beat["service_name"], beat["db"], beat["retry_period"]) == ("wc", 2, 60)
    # and a plain URL is passed through to all three as before
    url = "redis://127.0.0.1:6379/3"
    conf = celery_config(load_settings(redis_url=url, state_dir=tmp_path), WorkerOptions(simulate=True))
    assert conf["broker_url"] == conf["result_backend"] == conf["redbeat_redis_url"] == url
    assert "master_name" not in conf["broker_transport_options"]
    assert "sentinels" not in conf["redbeat_redis_options"]


def _put(state, doc: dict) -> bool:
    try:
        state.put("policy-config", "d", doc)
        return True
    except redis.ConnectionError:
        return False


def test_store_writes_to_the_master_the_sentinel_names_and_follows_a_failover(tmp_path):
    """The master's name from the setting (not the URL); the store follows the promoted replica."""
    from warmcast.runtime import open_state

    rig = SentinelRig(tmp_path / "redis").start()
    try:
        url = f"sentinel://127.0.0.1:{rig.sentinel_port}"
        settings = load_settings(redis_url=url, redis_master_name="wcmaster", key_prefix="t", state_dir=tmp_path)
        state = open_state(settings)
        key = state.key("policy-config", "d")
        state.put("policy-config", "d", {"a": 1})
        assert redis.Redis(port=rig.master_port).get(key) is not None, "the write did not reach the master"
        rig.kill_master()
        assert rig.wait_promoted(60), f"no promotion (logs in {rig.tmp})"
        # the same client object, now on the promoted replica; the sentinel may call it master a moment
        # before it lists it as a healthy one (MasterNotFoundError), which the next tick rides out
        assert wait_until(lambda: _put(state, {"a": 2}), 5), "no write through the sentinel after the failover"
        assert state.get("policy-config", "d") == {"a": 2}
        assert redis.Redis(port=rig.replica_port).get(key) is not None
    finally:
        rig.stop()
