"""tenure dashboard's defences, each attempted as an attacker would: a page on another port of
127.0.0.1 framing an action (in chromium), a cross-origin post with a valid cookie and CSRF
value, a cookie replayed after sign-out, an expired session, garbled and non-ASCII cookies,
a foreign ``Host`` (DNS rebinding), wrong tokens in a row (throttled), the security
headers on every kind of response, and the command's exposure rules (``--allow-remote``,
short tokens)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from selenium.webdriver.common.by import By
from test_dashboard import chromium, csp_violations

from tenure.cli import main as cli_main
from tenure.dashboard import DashboardServer, Settings, data
from tenure.dashboard.security import CONTENT_SECURITY_POLICY
from tenure.driver import Driver
from tenure.errors import InvalidConfiguration

TOKEN = "operator-token-0123456789"
COOKIE = "tenure_dashboard"


@pytest.fixture
def dead_task(admin: psycopg.Connection[Any]) -> uuid.UUID:
    driver = Driver(admin)
    enqueued = driver.task_enqueue("security", {"n": 1}, max_attempts=1)
    owner = uuid.uuid4()
    (lease,) = driver.task_acquire(owner, lease=30, kinds=["security"])
    driver.task_fail(lease.id, owner, lease.epoch, error="boom")
    return enqueued.id


@pytest.fixture
def dashboard(app_conninfo: str) -> Iterator[DashboardServer]:
    with DashboardServer(app_conninfo, settings=Settings(token=TOKEN, refresh=0)) as server:
        yield server


def _status(admin: psycopg.Connection[Any], task_id: uuid.UUID) -> str:
    row = admin.execute("SELECT status FROM tenure.task WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _sign_in(client: httpx.Client) -> str:
    """Sign ``client`` in; the CSRF value its pages carry."""
    signed = client.post("/login", data={"token": TOKEN})
    assert signed.status_code == 303, signed.text
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', client.get("/").text)
    assert found, "no CSRF value on the page of a signed-in operator"
    return found[1]


def _requeue(client: httpx.Client, task_id: uuid.UUID, csrf: str, **headers: str) -> httpx.Response:
    return client.post("/actions/task-requeue", data={"id": str(task_id), "csrf": csrf}, headers=headers)


class _Framer(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_page_on_another_port_cannot_frame_an_action(
    dashboard: DashboardServer, dead_task: uuid.UUID, admin: psycopg.Connection[Any]
) -> None:
    """Cookies do not separate ports, SameSite neither: the signed-in operator's browser sends
    its cookie to a frame that another port of 127.0.0.1 opens. The frame must stay empty."""
    target = f"{dashboard.url}/actions/task-requeue?id={dead_task}"
    handler = type("Framer", (_Framer,), {"page": f'<iframe id="victim" src="{target}"></iframe>'.encode()})
    framer = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=framer.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium() as browser:
            browser.get(f"{dashboard.url}/login")
            browser.find_element(By.ID, "token").send_keys(TOKEN)
            browser.find_element(By.ID, "sign-in").click()
            deadline = time.monotonic() + 30
            while not browser.get_cookie(COOKIE) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert browser.get_cookie(COOKIE), "not signed in"
            # Signed in, the confirmation page opens at the top level: no CSP complaint.
            browser.get(target)
            assert browser.find_elements(By.ID, "confirm")
            assert not csp_violations(browser)
            browser.get(f"http://127.0.0.1:{framer.server_address[1]}/")
            frame = browser.find_element(By.ID, "victim")
            refusals: list[str] = []
            buttons: list[Any] = []
            deadline = time.monotonic() + 30
            while not (refusals or buttons) and time.monotonic() < deadline:  # the frame loads
                time.sleep(0.1)
                refusals += [m for m in csp_violations(browser) if "frame-ancestors" in m]
                browser.switch_to.frame(frame)
                buttons = browser.find_elements(By.ID, "confirm")
                for button in buttons:  # what a tricked click would do
                    button.click()
                browser.switch_to.default_content()
            assert not buttons, "the confirmation page rendered inside another site's frame"
            assert refusals, "chromium logged no frame-ancestors refusal"
    finally:
        framer.shutdown()
        framer.server_close()
        thread.join(10)
    assert _status(admin, dead_task) == "dead"


def test_a_cross_origin_post_is_refused_even_with_cookie_and_csrf(
    dashboard: DashboardServer, dead_task: uuid.UUID, admin: psycopg.Connection[Any]
) -> None:
    with httpx.Client(base_url=dashboard.url) as client:
        csrf = _sign_in(client)
        here = dashboard.url
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Origin": f"http://localhost:{dashboard.port + 1}"},
            {"Sec-Fetch-Site": "same-site", "Origin": here},  # another port of the same host
            {"Sec-Fetch-Site": "cross-site"},
            {},  # a post relying on the cookie must say where it comes from
        ):
            refused = _requeue(client, dead_task, csrf, **headers)
            assert refused.status_code == 403 and "refused" in refused.text, headers
            assert _status(admin, dead_task) == "dead", headers
        # Signing out is guarded the same way: the session survives a forged sign-out.
        forged = client.post("/logout", data={"csrf": csrf}, headers={"Origin": "http://evil.example"})
        assert forged.status_code == 403
        done = _requeue(client, dead_task, csrf, **{"Origin": here, "Sec-Fetch-Site": "same-origin"})
        assert done.status_code == 303, done.text
    assert _status(admin, dead_task) == "pending"


def _state(admin: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Everything the task controls could change: each task's status, each kind's settings."""
    tasks = admin.execute("SELECT id, status, epoch FROM tenure.task ORDER BY id").fetchall()
    kinds = admin.execute("SELECT kind, paused, changed_at FROM tenure.task_kinds ORDER BY kind").fetchall()
    return [*tasks, *kinds]


@pytest.mark.parametrize("action", ["task-cancel", "kind-pause", "kind-resume"])
def test_task_controls_are_refused_without_sign_in_csrf_or_same_origin(
    dashboard: DashboardServer, admin: psycopg.Connection[Any], action: str
) -> None:
    driver = Driver(admin)
    driver.task_kind_set("paused-kind", paused=True)
    pending = driver.task_enqueue("security", {"n": 2})
    form = {"id": str(pending.id)} if action == "task-cancel" else {}
    form["kind"] = "paused-kind" if action == "kind-resume" else "security"
    before = _state(admin)
    here = dashboard.url
    with httpx.Client(base_url=dashboard.url) as client:
        attempts = [
            ("not signed in", {"Origin": here}, form),
            (
                "a wrong bearer token",
                {"Origin": here, "Authorization": "Bearer operator-token-wrong-one"},
                form,
            ),
        ]
        for why, headers, data_ in attempts:
            refused = client.post(f"/actions/{action}", data=data_, headers=headers)
            assert refused.status_code == 403, why
        csrf = _sign_in(client)
        signed_attempts = [
            ("no CSRF field", {"Origin": here}, form),
            ("a wrong CSRF field", {"Origin": here}, {**form, "csrf": "0" * 64}),
            ("another origin", {"Origin": "http://evil.example"}, {**form, "csrf": csrf}),
            ("another site", {"Sec-Fetch-Site": "cross-site"}, {**form, "csrf": csrf}),
            ("no origin at all", {}, {**form, "csrf": csrf}),
            (
                "a bearer from another origin",
                {"Origin": "http://evil.example", "Authorization": f"Bearer {TOKEN}"},
                form,
            ),
        ]
        for why, headers, data_ in signed_attempts:
            refused = client.post(f"/actions/{action}", data=data_, headers=headers)
            assert refused.status_code == 403 and "refused" in refused.text, why
        # A GET only shows the confirmation: it changes nothing either.
        assert client.get(f"/actions/{action}", params=form).status_code == 200
        assert _state(admin) == before
        # The same post from the dashboard's own page acts: the refusals above were the checks.
        done = client.post(f"/actions/{action}", data={**form, "csrf": csrf}, headers={"Origin": here})
        assert done.status_code == 303, done.text
    assert _state(admin) != before


def test_a_cookie_replayed_after_sign_out_is_refused(
    dashboard: DashboardServer, dead_task: uuid.UUID, admin: psycopg.Connection[Any]
) -> None:
    origin = {"Origin": dashboard.url}
    with httpx.Client(base_url=dashboard.url, headers=origin) as client:
        csrf = _sign_in(client)
        cookie = client.cookies[COOKIE]
        # /logout takes the CSRF value: without it the session stays.
        assert client.post("/logout").status_code == 403
        assert 'name="csrf"' in client.get("/").text
        out = client.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303
    with httpx.Client(base_url=dashboard.url, headers=origin, cookies={COOKIE: cookie}) as replay:
        refused = _requeue(replay, dead_task, csrf)
        assert refused.status_code == 403 and "sign in" in refused.text
        assert 'name="csrf"' not in replay.get("/").text
        assert replay.get(f"/actions/task-requeue?id={dead_task}").status_code == 303  # to /login
    assert _status(admin, dead_task) == "dead"


def test_an_expired_session_is_refused(
    app_conninfo: str, dead_task: uuid.UUID, admin: psycopg.Connection[Any]
) -> None:
    settings = Settings(token=TOKEN, refresh=0, session_lifetime=timedelta(seconds=2))
    with DashboardServer(app_conninfo, settings=settings) as server:
        with httpx.Client(base_url=server.url) as client:
            csrf = _sign_in(client)
            cookie = client.cookies[COOKIE]
            assert "Max-Age=2" in client.post("/login", data={"token": TOKEN}).headers["set-cookie"]
        time.sleep(2.5)
        # The browser forgets the cookie after Max-Age; whoever kept it sends it anyway.
        session, issued, mac = cookie.split(".")
        for kept in (cookie, f"{session}.{int(issued) + 60}.{mac}"):  # its issue time is signed
            with httpx.Client(
                base_url=server.url, headers={"Origin": server.url, "Cookie": f"{COOKIE}={kept}"}
            ) as replay:
                refused = _requeue(replay, dead_task, csrf)
                assert refused.status_code == 403 and "sign in" in refused.text, kept
    assert _status(admin, dead_task) == "dead"


def test_an_unreadable_cookie_signs_out_and_never_fails(dashboard: DashboardServer) -> None:
    garbled: list[bytes] = [
        "tenure_dashboard=é.1.ab".encode(),
        "tenure_dashboard=\xe9\xff".encode("latin-1"),
        b"tenure_dashboard=" + b"x" * 4000,
        b"tenure_dashboard=a.b.c",
        b"tenure_dashboard=....",
        b"tenure_dashboard=",
        b'tenure_dashboard="\\\\"',
    ]
    origin = dashboard.url.encode()
    with httpx.Client(base_url=dashboard.url) as client:
        for cookie in garbled:
            page = client.get("/", headers={b"Cookie": cookie})
            assert page.status_code == 200 and "sign in for actions" in page.text, cookie
            posted = client.post(
                "/actions/schedule-pause",
                data={"name": "x", "csrf": "é"},
                headers={b"Cookie": cookie, b"Origin": origin},
            )
            assert posted.status_code == 403, cookie
            out = client.post("/logout", headers={b"Cookie": cookie, b"Origin": origin})
            assert out.status_code == 303, cookie


def test_a_foreign_host_is_refused(app_conninfo: str) -> None:
    """DNS rebinding: evil.example resolved to 127.0.0.1 reaches the port with its own name."""
    settings = Settings(refresh=0, hosts=("dash.example",))
    with DashboardServer(app_conninfo, settings=settings) as server, httpx.Client() as client:
        url = f"{server.url}/tasks?format=json"
        for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example", "[::2]"):
            refused = client.get(url, headers={"Host": host})
            assert refused.status_code == 400 and "Invalid host header" in refused.text, host
        for host in ("127.0.0.1", f"localhost:{server.port}", "[::1]", "dash.example", "DASH.example:443"):
            assert client.get(url, headers={"Host": host}).status_code == 200, host


def test_every_kind_of_response_carries_the_security_headers(
    app_conninfo: str, dead_task: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(reader: data.Reader, window: timedelta) -> dict[str, Any]:
        raise RuntimeError("a page that fails")

    monkeypatch.setattr(data, "schedules", broken)
    with (
        DashboardServer(app_conninfo, settings=Settings(token=TOKEN, refresh=0)) as server,
        httpx.Client(base_url=server.url, headers={"Origin": server.url}) as client,
    ):
        csrf = _sign_in(client)
        responses = {
            "page": client.get("/tasks"),
            "json": client.get("/tasks?format=json"),
            "confirmation": client.get(f"/actions/task-requeue?id={dead_task}"),
            "redirect": _requeue(client, dead_task, csrf),
            "bad input": client.get("/tasks?window=5"),
            "refused": client.post("/actions/task-requeue", data={"id": str(dead_task)}),
            "missing": client.get("/nowhere"),
            "wrong method": client.put("/tasks"),
            "foreign host": client.get("/", headers={"Host": "evil.example"}),
            # uvicorn closes the connection after a failure: a connection of its own.
            "failure": httpx.get(f"{server.url}/schedules"),
            "static": client.get("/static/dashboard.css"),
        }
        for _ in range(6):
            wrong = client.post("/login", data={"token": "wrong"})
        responses["throttled"] = wrong
    statuses = {kind: response.status_code for kind, response in responses.items()}
    assert statuses == {
        "page": 200,
        "json": 200,
        "confirmation": 200,
        "redirect": 303,
        "bad input": 400,
        "refused": 403,
        "missing": 404,
        "wrong method": 405,
        "foreign host": 400,
        "failure": 500,
        "static": 200,
        "throttled": 429,
    }
    for kind, response in responses.items():
        headers = response.headers
        assert headers.get("content-security-policy") == CONTENT_SECURITY_POLICY, kind
        assert (
            "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
            and "default-src 'self'" in CONTENT_SECURITY_POLICY
        )
        assert headers.get("x-frame-options") == "DENY", kind
        assert headers.get("x-content-type-options") == "nosniff", kind
        assert headers.get("referrer-policy") == "same-origin", kind
        assert (headers.get("cache-control") == "no-store") == (kind != "static"), kind


def test_wrong_tokens_in_a_row_are_throttled(dashboard: DashboardServer) -> None:
    with httpx.Client(base_url=dashboard.url) as client:
        for _ in range(5):
            assert client.post("/login", data={"token": "wrong"}).status_code == 403
        # Throttled: even the right token is not looked at until the delay has passed.
        throttled = client.post("/login", data={"token": TOKEN})
        assert throttled.status_code == 429 and "too many wrong tokens from 127.0.0.1" in throttled.text
        assert int(throttled.headers["retry-after"]) >= 1
        # A local process cannot pass for another client: X-Forwarded-For is ignored unless
        # it comes from a trusted proxy.
        other = {"X-Forwarded-For": "192.0.2.7"}
        assert client.post("/login", data={"token": "wrong"}, headers=other).status_code == 429
        time.sleep(1.2)  # the first delay: 1 s, doubling with every further failure
        assert client.post("/login", data={"token": "wrong"}).status_code == 403
        assert client.post("/login", data={"token": TOKEN}).status_code == 429
        time.sleep(2.2)
        assert client.post("/login", data={"token": TOKEN}).status_code == 303
        # A success clears the count.
        assert client.post("/login", data={"token": "wrong"}).status_code == 403


def test_behind_a_trusted_proxy_wrong_tokens_count_per_forwarded_client(app_conninfo: str) -> None:
    settings = Settings(token=TOKEN, refresh=0, trusted_proxies=("127.0.0.1",))
    with (
        DashboardServer(app_conninfo, settings=settings) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        one, other = {"X-Forwarded-For": "192.0.2.7"}, {"X-Forwarded-For": "192.0.2.8"}
        for _ in range(5):
            assert client.post("/login", data={"token": "wrong"}, headers=one).status_code == 403
        throttled = client.post("/login", data={"token": "wrong"}, headers=one)
        assert throttled.status_code == 429 and "from 192.0.2.7" in throttled.text
        assert client.post("/login", data={"token": "wrong"}, headers=other).status_code == 403
    with pytest.raises(InvalidConfiguration, match="not an IP address or network of a trusted proxy"):
        DashboardServer(app_conninfo, settings=Settings(token=TOKEN, trusted_proxies=("proxy.example",)))


def test_the_command_exposes_the_dashboard_only_as_told(
    app_conninfo: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def listen(self: uvicorn.Server) -> None:
        raise AssertionError("the command went on to listen")

    monkeypatch.setattr(uvicorn.Server, "run", listen)  # a broken rule fails here rather than serve on
    monkeypatch.delenv("TENURE_DASHBOARD_TOKEN", raising=False)
    command = ["dashboard", "--db", app_conninfo, "--http"]
    refusals = {
        ("0.0.0.0:0",): "listens on 0.0.0.0, beyond this machine, only with --allow-remote",
        ("192.0.2.1:0", "--token", TOKEN): "only with --allow-remote",
        ("0.0.0.0:0", "--allow-remote"): "only with a token (--token or $TENURE_DASHBOARD_TOKEN)",
        ("127.0.0.1:0", "--token", "short-token"): "token is 11 characters long: it must have at least 16",
        ("0.0.0.0:0", "--allow-remote", "--token", "a"): "token is 1 characters long",
        ("127.0.0.1:0", "--allow-host", "dash.example:443"): "not a host name or address the Host",
    }
    for words, message in refusals.items():
        assert cli_main([*command, *words]) == 2, words
        captured = capsys.readouterr()
        assert message in captured.err and captured.err.count("\n") == 1, (words, captured.err)
        assert "tenure dashboard at" not in captured.out
    monkeypatch.setenv("TENURE_DASHBOARD_TOKEN", "too-short")
    assert cli_main([*command, "127.0.0.1:0"]) == 2
    assert "token is 9 characters long" in capsys.readouterr().err
    monkeypatch.undo()
    # The library keeps the same rules.
    with pytest.raises(InvalidConfiguration, match="--allow-remote"):
        DashboardServer(app_conninfo, host="0.0.0.0", settings=Settings(token=TOKEN))
    with pytest.raises(InvalidConfiguration, match="only with a token"):
        DashboardServer(app_conninfo, host="0.0.0.0", allow_remote=True)
    # Told, with a token: it listens, and answers to the names it was given.
    settings = Settings(token=TOKEN, refresh=0, hosts=("dash.example",))
    with (
        DashboardServer(app_conninfo, host="0.0.0.0", allow_remote=True, settings=settings) as server,
        httpx.Client() as client,
    ):
        url = f"http://127.0.0.1:{server.port}/"
        assert client.get(url, headers={"Host": "dash.example"}).status_code == 200
        assert client.get(url, headers={"Host": "evil.example"}).status_code == 400
