"""Schemathesis fuzz run of the OpenAPI document against the app (real Redis, seeded data).

Every operation gets generated requests, valid and invalid per the schema (positive
and negative modes), with the write token most of the time, and with the deployment
path parameter mostly set to the seeded deployment so requests reach real code
rather than stopping at 404.  Checks: no 5xx, status codes documented, responses
valid against their documented schema and content type.
"""
from __future__ import annotations

import random

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings as hsettings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,  # noqa: E402
                                               status_code_conformance)

from api_helpers import AUTH  # noqa: E402

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 20  # per operation and mode: ~1,000 requests in all


def test_openapi_fuzz(settings, seeded):
    from api.app import create_app

    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(settings))
    rng = random.Random(7)
    ran: dict[str, int] = {}
    codes: dict[int, int] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=op.as_strategy(generation_mode=mode))
            @hsettings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                       suppress_health_check=list(HealthCheck))
            def run(case):
                if isinstance(case.path_parameters, dict) and "deployment" in case.path_parameters \
                        and rng.random() < 0.8:
                    case.path_parameters["deployment"] = "demo"
                headers = {**(case.headers or {}), **(AUTH if rng.random() < 0.8 else {})}
                response = case.call_and_validate(headers=headers, checks=CHECKS, timeout=120)
                ran[op.label] = ran.get(op.label, 0) + 1
                codes[response.status_code] = codes.get(response.status_code, 0) + 1

            try:
                run()
            except Unsatisfiable:
                if mode is GenerationMode.POSITIVE:
                    raise
                # no parameters or body to make invalid (e.g. /healthz): nothing negative to send
    print(f"fuzz: {sum(ran.values())} requests over {len(ran)} operations; status codes {sorted(codes.items())}")
    assert len(ran) >= 16, ran  # every documented operation was exercised
    # the run reached real code (2xx), validation (422), auth (401) and unknown names (404)
    assert all(codes.get(c, 0) > 0 for c in (200, 401, 404, 422)), codes
