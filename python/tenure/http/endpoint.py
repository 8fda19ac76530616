"""``JsonEndpoint``: a small HTTP server on a background thread whose answers are
JSON, the base of the elector's and the replica's endpoints.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tenure.runtime.loop import Runtime


class _QuietServer(ThreadingHTTPServer):
    """Load balancers close their health-check connections with a reset: not an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class JsonEndpoint(Runtime):
    """A small HTTP server on a background thread whose answers are JSON: the base of
    the elector's and the replica's endpoints. Subclasses implement ``_answer``."""

    def __init__(self, *, host: str, port: int, thread_name: str) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive for load balancers and busy clients
            # The headers and the body leave in two writes: with Nagle's algorithm the body
            # waited for the client's delayed ACK, 40 ms per request on a kept-alive connection.
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                endpoint._answer(self, "GET")

            def do_POST(self) -> None:
                endpoint._answer(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _QuietServer((host, port), Handler)
        self._thread_name = thread_name
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, default=str).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        request.wfile.write(data)

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=self._thread_name, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
