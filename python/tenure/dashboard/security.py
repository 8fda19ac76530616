"""What keeps the dashboard's sign-in and actions to its operator: sessions that end and
can be revoked, the same-origin check of every form post, sign-in throttling, the check
of the ``Host`` header and the headers every response carries.

Sessions are a server-side set of live session ids held by this process (not a list of
revoked ones): signing out removes the id, so the old cookie is refused at once; a
restart forgets every session (everyone signs in again, and no revoked cookie can come
back to life); each dashboard process has its own sessions, so behind a load balancer an
operator signs in to each process (or the balancer keeps a client on one). The cookie
also carries its issue time under the HMAC, so it is refused after the lifetime even if
the server-side set were lost.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenure.errors import InvalidConfiguration

SHORTEST_TOKEN = 16
DEFAULT_SESSION_LIFETIME = timedelta(hours=4)
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
CONTENT_SECURITY_POLICY = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
_HOST_NAME = re.compile(r"[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?")
_COOKIE = re.compile(r"([A-Za-z0-9_-]{16,64})\.([0-9]{1,12})\.([0-9a-f]{64})")


def check_token(token: str | None) -> None:
    """A token an attacker cannot guess by trying: at least 16 characters."""
    if token is not None and len(token) < SHORTEST_TOKEN:
        raise InvalidConfiguration(
            f"the dashboard's token is {len(token)} characters long: it must have at least "
            f"{SHORTEST_TOKEN} (for example: python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )


def check_proxies(addresses: Iterable[str]) -> None:
    """Trusted proxies are IP addresses or networks (uvicorn's ``forwarded_allow_ips``)."""
    for address in addresses:
        try:
            ipaddress.ip_network(address, strict=False)
        except ValueError:
            raise InvalidConfiguration(
                f"not an IP address or network of a trusted proxy: {address[:100]!r} (for example 127.0.0.1)"
            ) from None


class Sessions:
    """The signed-in sessions of one dashboard process. A cookie is
    ``ID.ISSUED.HMAC(token, ID, ISSUED)``; it is valid while its id is in the set and its
    issue time is less than ``lifetime`` ago. At most ``limit`` sessions are kept: the
    oldest go first."""

    def __init__(
        self,
        token: str,
        lifetime: timedelta,
        *,
        clock: Callable[[], float] = time.time,
        limit: int = 1000,
    ) -> None:
        self.key = token.encode()
        self.lifetime = lifetime.total_seconds()
        self.clock = clock
        self.limit = limit
        self.issued: dict[str, int] = {}  # session id -> issue time (insertion order: oldest first)
        self.lock = threading.Lock()

    def _sign(self, purpose: str, *parts: object) -> str:
        text = ":".join((purpose, *map(str, parts)))
        return hmac.new(self.key, text.encode(), "sha256").hexdigest()

    def issue(self) -> str:
        """A new session: its cookie value."""
        session = secrets.token_urlsafe(24)
        now = int(self.clock())
        with self.lock:
            self._forget_expired(now)
            while len(self.issued) >= self.limit:
                del self.issued[next(iter(self.issued))]
            self.issued[session] = now
        return f"{session}.{now}.{self._sign('session', session, now)}"

    def check(self, cookie: str) -> str | None:
        """The session id of a valid cookie, else None (garbled, forged, expired, revoked)."""
        found = _COOKIE.fullmatch(cookie) if cookie.isascii() else None
        if found is None:
            return None
        session, issued, mac = found[1], int(found[2]), found[3]
        if not hmac.compare_digest(mac.encode(), self._sign("session", session, issued).encode()):
            return None
        with self.lock:
            if self.issued.get(session) != issued:
                return None
            if self.clock() >= issued + self.lifetime:
                del self.issued[session]
                return None
        return session

    def csrf(self, session: str) -> str:
        return self._sign("csrf", session)

    def csrf_matches(self, session: str, given: str) -> bool:
        return given.isascii() and hmac.compare_digest(given.encode(), self.csrf(session).encode())

    def revoke(self, session: str) -> None:
        with self.lock:
            self.issued.pop(session, None)

    def _forget_expired(self, now: float) -> None:
        for session in [s for s, issued in self.issued.items() if now >= issued + self.lifetime]:
            del self.issued[session]


class SignInThrottle:
    """Wrong tokens per client address: after ``free`` failures, each further try must wait
    ``first`` seconds after the last failure, doubling with each failure up to ``longest``.
    An address is forgotten ``longest`` seconds after its last failure, and on success. At
    most ``limit`` addresses are remembered (the one whose last failure is oldest goes)."""

    def __init__(
        self,
        *,
        free: int = 5,
        first: float = 1.0,
        longest: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        limit: int = 10_000,
    ) -> None:
        self.free, self.first, self.longest = free, first, longest
        self.clock = clock
        self.limit = limit
        self.failures: dict[str, tuple[int, float]] = {}  # address -> (failures, last failure)
        self.lock = threading.Lock()

    def wait(self, address: str) -> float:
        """Seconds ``address`` must still wait before it may try a token (0: it may now)."""
        now = self.clock()
        with self.lock:
            count, last = self.failures.get(address, (0, now))
            if now - last >= self.longest:
                del self.failures[address]
                return 0.0
        if count < self.free:
            return 0.0
        delay = min(self.longest, self.first * 2.0 ** (count - self.free))
        return max(0.0, last + delay - now)

    def failed(self, address: str) -> None:
        now = self.clock()
        with self.lock:
            count, _ = self.failures.pop(address, (0, now))
            while len(self.failures) >= self.limit:
                del self.failures[next(iter(self.failures))]
            self.failures[address] = (count + 1, now)

    def succeeded(self, address: str) -> None:
        with self.lock:
            self.failures.pop(address, None)


def cross_origin(headers: Mapping[str, str], *, cookie_based: bool) -> str | None:
    """Why a form post does not come from a page of this site, or None if it does.

    ``Sec-Fetch-Site`` must be ``same-origin`` (another port of the same host is only
    ``same-site``) and ``Origin`` must name the host and port the request was sent to.
    A post that relies on the sign-in cookie must carry at least one of them (every
    current browser sends both); a script with a bearer token may send neither.
    """
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if site is not None and site != "same-origin":
        return f"refused: the request comes from another site (Sec-Fetch-Site: {site})"
    if origin is not None:
        _, _, netloc = origin.partition("://")
        if not netloc or netloc.lower() != headers.get("host", "").lower():
            return f"refused: the request comes from another origin ({origin[:100]})"
    if site is None and origin is None and cookie_based:
        return "refused: the request names neither its Origin nor Sec-Fetch-Site"
    return None


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def host_names(names: Iterable[str]) -> list[str]:
    """Names as the Host header carries them: an IPv6 address in brackets, lower case."""
    found = []
    for name in names:
        if not _HOST_NAME.fullmatch(name):
            raise InvalidConfiguration(
                f"not a host name or address the Host header may carry: {name[:100]!r} "
                "(a name such as dashboard.example.org, an IPv4 or IPv6 address, no port)"
            )
        found.append(f"[{name}]" if ":" in name and not name.startswith("[") else name.lower())
    return found


class Guard:
    """The outermost layer of the application: a ``Host`` that is not one of ``hosts``
    (plus localhost, 127.0.0.1 and ::1) gets HTTP 400 (against DNS rebinding), and every
    response, errors included, gets the security headers; every response but a static
    file also gets ``Cache-Control: no-store`` (pages carry CSRF values and live data)."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str] = ()) -> None:
        self.allowed_hosts = sorted(set(host_names((*LOCAL_HOSTS, *hosts))))
        self.app = TrustedHostMiddleware(app, allowed_hosts=self.allowed_hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = Headers(raw=message.get("headers", []))
                extra = [(k.encode(), v.encode()) for k, v in HEADERS.items() if k not in present]
                if not static and "cache-control" not in present:
                    extra.append((b"cache-control", b"no-store"))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)
