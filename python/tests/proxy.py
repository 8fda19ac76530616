"""A TCP proxy between client and server that can hold traffic, as a network pause does.

While paused it accepts bytes but forwards none; on resume it forwards what it
held, late, which is how a healed partition delivers statements sent during it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from types import TracebackType

from tenure.testing.netns import in_namespace


class PausingProxy:
    def __init__(
        self, upstream_host: str, upstream_port: int, *, listener: socket.socket | None = None
    ) -> None:
        """Listens on a free port of 127.0.0.1, or on ``listener`` (one of another network
        namespace: :func:`forwarder`)."""
        self.upstream = (upstream_host, upstream_port)
        self._listener = listener or socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._requests_flow = threading.Event()  # client to server
        self._answers_flow = threading.Event()  # server to client
        self.resume()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []

    def pause(self, *, requests_only: bool = False) -> None:
        """Hold what either side sends, or (``requests_only``) what clients send: answers to
        requests already forwarded still arrive, so the next request is the first held."""
        self._requests_flow.clear()
        if not requests_only:
            self._answers_flow.clear()

    def resume(self) -> None:
        self._requests_flow.set()
        self._answers_flow.set()

    def reset(self) -> None:
        """Cut every open connection at once, as a network reset does; new ones still pass."""
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            for source, target, flow in (
                (client, server, self._requests_flow),
                (server, client, self._answers_flow),
            ):
                threading.Thread(target=self._pump, args=(source, target, flow), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, flow: threading.Event) -> None:
        try:
            while chunk := source.recv(65536):
                flow.wait()
                if self._closed.is_set():
                    return
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> PausingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed.set()
        self.resume()
        self._listener.close()
        for sock in self._sockets:
            sock.close()


@contextlib.contextmanager
def forwarder(namespace: str, upstream: tuple[str, int]) -> Iterator[int]:
    """Forward connections to the port yielded, listening on every address of network
    ``namespace`` (test_partition, test_partition_stop), to ``upstream``."""
    listener = in_namespace(namespace, lambda: socket.create_server(("0.0.0.0", 0)))
    with PausingProxy(*upstream, listener=listener) as proxy:
        yield proxy.port
