"""The replica's HTTP side: ``ReplicaServer`` answers the load balancer
(``GET /health/active`` 200 only on the active replica, ``GET /health/live``) and
serves the application's routes; ``active_only`` makes a route refuse requests (503)
while the replica is passive, or when a write on the way is refused.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tenure.errors import NotPrimary
from tenure.http.endpoint import JsonEndpoint
from tenure.metrics import send_metrics
from tenure.runtime.replicas import ReplicaManager

log = logging.getLogger(__name__)

Route = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


def active_only(manager: ReplicaManager) -> Callable[[Route], Route]:
    """A route decorator: while the replica is passive, answer 503 with a clear error.

    A write refused on the way (NotPrimary) is answered the same way.
    """

    def decorate(route: Route) -> Route:
        @functools.wraps(route)
        def guarded(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            refusal = {
                "error": f"replica {manager.name} is passive and serves no requests; "
                "send them to the active replica through the load balancer",
                "role": "passive",
                "replica": manager.name,
            }
            if not manager.is_active():
                return 503, refusal
            try:
                return route(request)
            except NotPrimary as refused:
                return 503, {**refusal, "error": f"{refusal['error']} ({refused.message})"}

        return guarded

    return decorate


class ReplicaServer(JsonEndpoint):
    """Serves ``/health/active``, ``/health/live`` and the given routes, on a background thread.

    ``routes`` maps (method, path) to a function of the JSON request body that
    returns (status, JSON body).
    """

    def __init__(
        self,
        manager: ReplicaManager,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        routes: dict[tuple[str, str], Route] | None = None,
    ) -> None:
        self.manager = manager
        self.routes = dict(routes or {})
        super().__init__(host=host, port=port, thread_name="tenure-replica-http")

    def _answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        status: int
        body: dict[str, Any]
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        path = request.path.split("?", 1)[0]
        if method == "GET" and path == "/metrics":
            send_metrics(request, self.manager.metrics)
            return
        if method == "GET" and path == "/health/active":
            body = self.manager.status()
            status = 200 if body["role"] == "active" else 503
        elif method == "GET" and path == "/health/live":
            status, body = 200, {"live": True, **self.manager.status()}
        elif (method, path) in self.routes:
            try:
                payload = json.loads(raw) if raw else {}
            except ValueError as error:
                status, body = 400, {"error": f"request body is not JSON: {error}"}
            else:
                try:
                    status, body = self.routes[(method, path)](payload)
                except Exception as error:
                    log.exception("route %s %s failed", method, path)
                    status, body = 500, {"error": f"{error.__class__.__name__}: {error}"}
        else:
            known = ", ".join(
                f"{m} {p}"
                for m, p in [("GET", "/health/active"), ("GET", "/health/live"), ("GET", "/metrics")]
            )
            status, body = 404, {"error": f"no route {method} {path}; try {known}"}
        self._reply(request, status, body)
