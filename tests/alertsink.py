"""A real HTTP webhook sink on a loopback port (a thread), recording every JSON body posted to it:
stands in for the on-call hook, the redeploy pipeline and a DR target's scaler webhook."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Sink:
    def __init__(self) -> None:
        self.posts: list[tuple[str, dict, dict]] = []  # (path, headers, body)
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                sink.posts.append((self.path, dict(self.headers), json.loads(raw or b"{}")))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}')

            def log_message(self, *_):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self, path: str) -> list[dict]:
        return [b for p, _, b in self.posts if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
