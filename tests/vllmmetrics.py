"""Reading a real vLLM server's own request records from its /metrics text (no warmcast code, so
tests can check warmcast's readings against it), and serving such text from a small endpoint."""
from __future__ import annotations

import re


def waited_longer_than(before: str, after: str, at_least_s: float,
                       name: str = "vllm:request_queue_time_seconds") -> tuple[float, int]:
    """(bound, requests) of the load between two /metrics texts whose time in the WAITING phase,
    by the server's own ``vllm:request_queue_time_seconds`` histogram (or the histogram ``name``),
    exceeded ``bound`` (its smallest bucket edge at or above ``at_least_s``)."""
    def hist(text: str) -> tuple[dict[float, float], float]:
        buckets: dict[float, float] = {}
        for le, v in re.findall(rf'^{name}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}} (\S+)$', text, re.M):
            buckets[float(le)] = buckets.get(float(le), 0.0) + float(v)
        return buckets, sum(float(v) for v in re.findall(rf'^{name}_count\{{[^}}]*\}} (\S+)$', text, re.M))

    (b0, c0), (b1, c1) = hist(before), hist(after)
    bound = min(le for le in b1 if le >= at_least_s)
    return bound, round((c1 - c0) - (b1[bound] - b0.get(bound, 0.0)))


def serve_metrics(text) -> tuple:
    """(server, base URL): a small HTTP endpoint answering /metrics with ``text()`` as Prometheus text,
    for tests whose counters must not move between the reads they compare (a real vLLM's would)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            body = text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)   # a free port, chosen by the system
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"
