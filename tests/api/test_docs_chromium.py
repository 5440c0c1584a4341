"""/docs and /redoc work with the network off: headless Chromium, a real uvicorn, loopback only.

Swagger UI and ReDoc load their scripts from the app itself (no CDN), so the operations are
listed in the rendered page even where nothing outside the cluster can be reached.
"""
from __future__ import annotations

import re

import httpx
import pytest

from browser import chromium, run_chromium, serve_api


@pytest.fixture
def server(settings, tmp_path):
    yield from serve_api(settings, tmp_path)


def _operations(server: str) -> set[tuple[str, str]]:
    spec = httpx.get(server + "/openapi.json").json()
    return {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}


def test_swagger_ui_lists_every_operation_offline(server, tmp_path):
    chrome = chromium()
    html = httpx.get(server + "/docs").text
    assert not re.search(r'(src|href)="(https?:)?//', html), "the docs page must not load anything from outside"
    dom = run_chromium(chrome, tmp_path, "--virtual-time-budget=20000", "--dump-dom", server + "/docs").stdout
    shown = set(re.findall(r'opblock-summary-method">(\w+)</span>(?:<[^>]*>)*?<span class="opblock-summary-path" '
                           r'data-path="([^"]+)"', dom))
    want = _operations(server)
    assert len(want) >= 15 and want <= shown, f"missing from /docs: {sorted(want - shown)}\n{dom[-1500:]}"


def test_redoc_renders_the_operations_offline(server, tmp_path):
    chrome = chromium()
    html = httpx.get(server + "/redoc").text
    assert not re.search(r'(src|href)="(https?:)?//', html) and "fonts.googleapis" not in html
    dom = run_chromium(chrome, tmp_path, "--virtual-time-budget=20000", "--dump-dom", server + "/redoc").stdout
    spec = httpx.get(server + "/openapi.json").json()
    summaries = {op["summary"] for ops in spec["paths"].values() for op in ops.values() if op.get("summary")}
    missing = {s for s in summaries if s.replace("&", "&amp;") not in dom}
    assert len(summaries) >= 15 and not missing, f"missing from /redoc: {sorted(missing)}\n{dom[-1500:]}"
