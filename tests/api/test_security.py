"""Bearer tokens, size limits, and that client input never reaches paths or other deployments."""
from __future__ import annotations

import io

import pytest
from fastapi.testclient import TestClient

from api_helpers import AUTH, WRITE, synthetic_frame

# Every route that changes state, with a body that would be accepted with the token.
MUTATING = [
    ("/v1/deployments/demo/observations", {"json": {"observations": [{"time": "2024-01-08T00:00:00", "requests": 1}]}}),
    ("/v1/deployments/demo/profile", {"json": {"profile": "night"}}),
    ("/v1/deployments/demo/pause", {"json": {"reason": "x"}}),
    ("/v1/deployments/demo/resume", {}),
    ("/v1/deployments/demo/whatif", {"json": {"policies": ["reactive"], "test_start": "2024-01-07T00:00:00"}}),
    ("/v1/deployments/demo/whatif/upload", {"files": {"file": ("log.csv", b"time,requests\n")},
                                            "data": {"test_start": "2024-01-07 00:00"}}),
]


@pytest.mark.parametrize("path, kw", MUTATING, ids=[p.rsplit("/", 1)[-1] for p, _ in MUTATING])
def test_mutating_routes_need_the_token(client, seeded, state, path, kw):
    before = (state.paused("demo"), seeded.series("demo").count())
    assert client.post(path, **kw).status_code == 401
    assert client.post(path, headers={"Authorization": "Bearer wrong"}, **kw).status_code == 403
    assert client.post(path, headers={"Authorization": WRITE}, **kw).status_code == 401  # not a bearer header
    assert (state.paused("demo"), seeded.series("demo").count()) == before  # nothing changed
    assert state.audit_log("demo") == []


def test_token_is_checked_before_the_body_is_read(client, seeded):
    """Malformed or oversized bodies without a token still get 401/403, not 422/413."""
    for body in (b"{not json", b"x" * (5 << 20)):
        r = client.post("/v1/deployments/demo/profile", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 401, r.text
        r = client.post("/v1/deployments/demo/profile", content=body,
                        headers={"content-type": "application/json", "Authorization": "Bearer wrong"})
        assert r.status_code == 403, r.text


def test_writes_are_closed_without_a_configured_token(settings, seeded):
    from api.app import create_app

    with TestClient(create_app(settings.model_copy(update={"api_token": None}))) as c:
        r = c.post("/v1/deployments/demo/pause", headers={"Authorization": "Bearer anything"})
        assert r.status_code == 403 and "WARMCAST_API_TOKEN" in r.json()["detail"]


def test_read_token_is_enforced_when_configured(settings, seeded):
    from api.app import create_app

    s = settings.model_copy(update={"api_read_token": "reader"})
    with TestClient(create_app(s)) as c:
        for path in ("/v1/deployments", "/v1/deployments/demo/forecast", "/v1/keda/demo", "/metrics"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"Authorization": "Bearer nope"}).status_code == 403, path
            assert c.get(path, headers={"Authorization": "Bearer reader"}).status_code == 200, path
            assert c.get(path, headers=AUTH).status_code == 200, path  # the write token reads too
        assert c.get("/healthz").status_code == 200  # probes stay open
        # the read token does not write
        assert c.post("/v1/deployments/demo/pause", headers={"Authorization": "Bearer reader"}).status_code == 403


def test_bodies_over_the_limit_get_413(settings, seeded):
    from api.app import create_app
    from api.deps import ApiConfig

    with TestClient(create_app(settings, ApiConfig(max_body_bytes=1000, max_upload_bytes=5000))) as c:
        big = {"observations": [{"time": "2024-01-08T00:00:00", "requests": 1}] * 100}
        assert c.post("/v1/deployments/demo/observations", json=big, headers=AUTH).status_code == 413

        def chunks():  # no Content-Length: counted as it streams
            for _ in range(10):
                yield b" " * 500

        r = c.post("/v1/deployments/demo/profile", content=chunks(),
                   headers={**AUTH, "content-type": "application/json"})
        assert r.status_code == 413
        up = c.post("/v1/deployments/demo/whatif/upload", headers=AUTH, data={"test_start": "2024-01-07"},
                    files={"file": ("log.csv", b"x" * 6000)})
        assert up.status_code == 413
        assert seeded.series("demo").count() == 7 * 1440  # nothing written


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "demo%00", "DEMO", "a" * 80, "demo;rm -rf", "%2e%2e"])
def test_hostile_deployment_names_are_404(client, seeded, name):
    assert client.get(f"/v1/deployments/{name}/forecast").status_code == 404
    assert client.post(f"/v1/deployments/{name}/observations", headers=AUTH,
                       json={"observations": [{"time": "2024-01-08T00:00:00", "requests": 1}]}).status_code == 404


def test_observations_cannot_create_a_new_deployment(client, seeded, store):
    r = client.post("/v1/deployments/intruder/observations", headers=AUTH,
                    json={"observations": [{"time": "2024-01-08T00:00:00", "requests": 1}]})
    assert r.status_code == 404 and "intruder" not in store.deployments()


def test_uploads_land_under_the_data_dir_with_generated_names(client, seeded, settings, state):
    """The client's file name picks a suffix only; the log is saved as uploads/<uuid>.<suffix>.

    The job goes to the real Redis broker (under this test's prefix); no worker runs
    here, so the job record the API keeps shows what the task received."""
    r = client.post("/v1/deployments/demo/whatif/upload", headers=AUTH,
                    data={"test_start": "2024-01-07 00:00", "policies": "reactive,oracle"},
                    files={"file": ("../../../../etc/passwd.csv", b"time,requests\n2024-01-07 00:00:00,5\n")})
    assert r.status_code == 202, r.text
    job = r.json()["job_id"]
    kwargs = state.get("job", job)["kwargs"]
    path = kwargs["log_path"]
    uploads = (settings.state_dir / "uploads").resolve()
    assert str(path).startswith(str(uploads) + "/") and path.endswith(".csv") and "passwd" not in path
    assert open(path, "rb").read().startswith(b"time,requests")
    assert kwargs["deployment"] == "demo" and kwargs["policies"] == ["reactive", "oracle"]
    assert client.get(f"/v1/deployments/demo/whatif/{job}").json()["status"] == "PENDING"
    bad = client.post("/v1/deployments/demo/whatif/upload", headers=AUTH, data={"test_start": "2024-01-07"},
                      files={"file": ("run.sh", b"rm -rf /")})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "file"]
    bad = client.post("/v1/deployments/demo/whatif/upload", headers=AUTH, data={"test_start": "2024-01-07",
                      "policies": "reactive,$(reboot)"}, files={"file": ("a.csv", b"time,requests\n")})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "policies"]


def test_jobs_of_another_deployment_are_invisible(client, seeded, state, store, settings, tmp_path):
    from api.app import create_app
    from warmcast.config.deployments import DeploymentsFile, demo_deployment

    job = "0123456789abcdef0123456789abcdef"
    state.put("job", job, {"deployment": "demo", "submitted_at": "x", "source": "stored load", "policies": ["static"]})
    store.upsert_frame("other", synthetic_frame(days=1))
    assert client.get(f"/v1/deployments/other/whatif/{job}").status_code == 404
    assert client.get("/v1/deployments/demo/whatif/not-a-job-id").status_code == 422
    assert client.get("/v1/deployments/demo/whatif/" + "f" * 32).status_code == 404
