"""API fixtures: a real Redis (the shared conftest's server and per-test prefix) and synthetic data."""
from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api_helpers import WRITE, stored_forecast, synthetic_frame
from warmcast.config.settings import load_settings
from warmcast.state import StateStore


@pytest.fixture(autouse=True)
def generous_deadline(monkeypatch):
    """A forecast fit takes minutes on a loaded shared test machine: tests that are not about
    the request deadline must not trip it (the deadline test sets its own)."""
    monkeypatch.setenv("WARMCAST_API_DEADLINE_S", "900")


@pytest.fixture
def settings(redis_server_url, key_prefix, tmp_path):
    return load_settings(redis_url=redis_server_url, key_prefix=key_prefix, api_token=WRITE,
                         state_dir=tmp_path / "state", models_dir=tmp_path / "models")


@pytest.fixture
def state(redis_client, key_prefix) -> StateStore:
    return StateStore(redis_client, key_prefix)


@pytest.fixture
def seeded(store, state):
    """Demo deployment with a week of load and a forecast stored the way the workers store it."""
    store.upsert_frame("demo", synthetic_frame())
    state.put_forecast("demo", stored_forecast(), trained_at="2024-01-07 23:00:00")
    return store


@pytest.fixture
def client(settings):
    from api.app import create_app

    with TestClient(create_app(settings)) as c:
        yield c


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployments.yaml"


@pytest.fixture
def example_client(settings):
    """The API serving the shipped example deployments file."""
    from api.app import create_app

    with TestClient(create_app(settings.model_copy(update={"deployments_file": EXAMPLE}))) as c:
        yield c
