"""The Starlette application: one route per page (HTML, or JSON at the same path with
``Accept: application/json`` or ``?format=json``), and the operator actions behind a token.

Actions exist only when the dashboard was started with a token (16 characters at least).
An operator signs in once with it (a cookie holding a session id and its issue time under
an HMAC of the token, HttpOnly, SameSite=Strict; see :mod:`tenure.dashboard.security`);
every action then needs that session, neither expired nor signed out, the CSRF field of
its form (another HMAC of the session id) and a same-origin ``Origin`` or
``Sec-Fetch-Site``. A script may send ``Authorization: Bearer <token>`` instead. Every
action goes through a confirmation page first, and bad input is refused with a message
before anything is called. Wrong tokens are throttled per client address.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout, TooManyRequests
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from tenure.connect import connection_options
from tenure.dashboard import charts, data, security
from tenure.dashboard.role import check_role
from tenure.driver import Driver
from tenure.errors import InvalidConfiguration, TenureError

HERE = Path(__file__).resolve().parent
COOKIE = "tenure_dashboard"
DEFAULT_WINDOW = timedelta(minutes=15)
# A request waits this long for one of the pool's connections, and at most this many
# wait at once; the others are answered 503 at once, with Retry-After (see busy()).
POOL_WAIT = 5.0
POOL_WAITING = 8
RETRY_AFTER = 5


@dataclass(frozen=True)
class Settings:
    """``token``: actions are possible only with one; ``refresh``: seconds between page reloads
    (0: never); ``window``: the span of the charts unless a page asks for another;
    ``allow_privileged_role``: start even when the database role is a superuser or may write
    tenure's tables directly (see :func:`tenure.dashboard.role.check_role`);
    ``session_lifetime``: how long a sign-in lasts; ``hosts``: the names (or addresses) a
    request's ``Host`` may carry besides localhost, 127.0.0.1 and ::1 (the server adds the
    one it listens on); ``trusted_proxies``: the addresses of proxies whose
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` name the client (none: the headers are
    ignored, so no local process can pass for another client and dodge the sign-in
    throttle)."""

    token: str | None = None
    refresh: float = 5.0
    window: timedelta = DEFAULT_WINDOW
    allow_privileged_role: bool = False
    session_lifetime: timedelta = security.DEFAULT_SESSION_LIFETIME
    hosts: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()


def plain(value: Any) -> Any:
    """A value as JSON can carry it: intervals in seconds, times in ISO 8601, ids as text."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


# --- actions ---------------------------------------------------------------------------


class BadInput(ValueError):
    """An action's input is wrong: HTTP 400, nothing was changed."""


def _uuid(params: dict[str, str], name: str) -> uuid.UUID:
    text = params.get(name, "").strip()
    try:
        return uuid.UUID(text)
    except ValueError:
        raise BadInput(f"{name} must be a UUID, got {text!r}") from None


def _text(params: dict[str, str], name: str) -> str:
    text = params.get(name, "")
    if not text.strip():
        raise BadInput(f"{name} must not be empty")
    return text


def _seconds(params: dict[str, str], name: str, default: float | None = None) -> float:
    text = params.get(name, "").strip()
    if not text and default is not None:
        return default
    try:
        seconds = float(text)
    except ValueError:
        raise BadInput(f"{name} must be a number of seconds, got {text!r}") from None
    if not 0 <= seconds < 10**9:
        raise BadInput(f"{name} must be from 0 to 1e9 seconds, got {text!r}")
    return seconds


def _flag(params: dict[str, str], name: str) -> bool:
    text = params.get(name, "").strip().lower()
    if text not in ("", "0", "1", "on", "true", "false"):
        raise BadInput(f"{name} must be true or false, got {text!r}")
    return text in ("1", "on", "true")


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str
    back: str


@dataclass(frozen=True)
class Action:
    title: str
    fields: tuple[str, ...]
    explain: Callable[[dict[str, str]], str]
    run: Callable[[Driver, dict[str, str]], Outcome]


def _requeue(driver: Driver, p: dict[str, str]) -> Outcome:
    task_id = _uuid(p, "id")
    delay = _seconds(p, "delay", 0.0)
    back = f"/tasks/{task_id}"
    if driver.task_requeue(task_id, delay=delay):
        return Outcome(True, f"task {task_id} requeued", back)
    return Outcome(False, f"task {task_id} is not dead: left as it is", back)


def _eject(driver: Driver, p: dict[str, str]) -> Outcome:
    task_id = _uuid(p, "id")
    lease = _seconds(p, "lease", 30.0)
    if lease <= 0:
        raise BadInput("lease must be more than 0 seconds")
    owner = uuid.uuid4()
    back = f"/tasks/{task_id}"
    granted = driver.task_eject(task_id, owner, lease=lease)
    if granted is None:
        return Outcome(False, f"task {task_id} is finished: nothing to take over", back)
    return Outcome(
        True,
        f"task {task_id} taken over by {owner} in epoch {granted.epoch} until {granted.lease_until:%H:%M:%S}",
        back,
    )


def _cancel(driver: Driver, p: dict[str, str]) -> Outcome:
    task_id = _uuid(p, "id")
    back = f"/tasks/{task_id}"
    if driver.task_cancel(task_id):
        return Outcome(True, f"task {task_id} cancelled", back)
    return Outcome(False, f"task {task_id} had already finished: left as it is", back)


def _kind(pause: bool) -> Callable[[Driver, dict[str, str]], Outcome]:
    def run(driver: Driver, p: dict[str, str]) -> Outcome:
        kind = _text(p, "kind")
        settings = driver.task_kind_set(kind, paused=pause)
        back = f"/tasks?{urlencode({'kind': kind})}"
        return Outcome(True, f"kind {kind} {'paused' if settings.paused else 'resumed'}", back)

    return run


def _purge(driver: Driver, p: dict[str, str]) -> Outcome:
    older = _seconds(p, "older_than")
    dead = _flag(p, "include_dead")
    purged = driver.task_purge(older_than=older, include_dead=dead)
    return Outcome(True, f"{purged} finished tasks purged", "/tasks")


def _batch(skip: bool) -> Callable[[Driver, dict[str, str]], Outcome]:
    def run(driver: Driver, p: dict[str, str]) -> Outcome:
        keyspace, batch_id = _text(p, "keyspace"), _uuid(p, "id")
        repair = driver.batch_skip if skip else driver.batch_retry
        if repair(keyspace, batch_id):
            return Outcome(True, f"batch {batch_id} {'skipped' if skip else 'queued again'}", "/batches")
        return Outcome(False, f"batch {batch_id} of {keyspace} is not invalid: left as it is", "/batches")

    return run


def _schedule(pause: bool) -> Callable[[Driver, dict[str, str]], Outcome]:
    def run(driver: Driver, p: dict[str, str]) -> Outcome:
        name = _text(p, "name")
        info = driver.schedule_pause(name) if pause else driver.schedule_resume(name)
        state = "paused" if info.paused else f"running, next slot {info.next_slot}"
        return Outcome(True, f"schedule {name} {state}", "/schedules")

    return run


ACTIONS: dict[str, Action] = {
    "task-requeue": Action(
        "Requeue a dead task",
        ("id", "delay"),
        lambda p: f"Task {p.get('id')} gets another life: pending again, due after {p.get('delay') or 0} s.",
        _requeue,
    ),
    "task-eject": Action(
        "Take a task over",
        ("id", "lease"),
        lambda p: (
            f"Task {p.get('id')} is leased to a new owner for {p.get('lease') or 30} s; its current "
            "owner's writes are refused from now on."
        ),
        _eject,
    ),
    "task-cancel": Action(
        "Cancel a task",
        ("id",),
        lambda p: (
            f"Task {p.get('id')} is cancelled: if it waits or is due it never runs; if it is leased, its "
            "holder's outcome and fenced writes are refused from now on. Tasks that run after it die."
        ),
        _cancel,
    ),
    "kind-pause": Action(
        "Pause a kind",
        ("kind",),
        lambda p: (
            f"No task of kind {p.get('kind')} is leased until the kind is resumed; the leased ones run on."
        ),
        _kind(pause=True),
    ),
    "kind-resume": Action(
        "Resume a kind",
        ("kind",),
        lambda p: f"Tasks of kind {p.get('kind')} are leased again, within the kind's limits.",
        _kind(pause=False),
    ),
    "task-purge": Action(
        "Purge finished tasks",
        ("older_than", "include_dead"),
        lambda p: (
            f"Tasks done or cancelled more than {p.get('older_than')} s ago are deleted"
            + (", dead ones too." if _flag(p, "include_dead") else " (dead ones stay).")
        ),
        _purge,
    ),
    "batch-skip": Action(
        "Skip an invalid batch",
        ("keyspace", "id"),
        lambda p: (
            f"Batch {p.get('id')} of queue {p.get('keyspace')} is skipped: its key goes on past it, "
            "and it is never submitted again."
        ),
        _batch(skip=True),
    ),
    "batch-retry": Action(
        "Retry an invalid batch",
        ("keyspace", "id"),
        lambda p: (
            f"Batch {p.get('id')} of queue {p.get('keyspace')} is queued again, in its place in its "
            "key's order."
        ),
        _batch(skip=False),
    ),
    "schedule-pause": Action(
        "Pause a schedule",
        ("name",),
        lambda p: f"Schedule {p.get('name')} makes no tasks until it is resumed.",
        _schedule(pause=True),
    ),
    "schedule-resume": Action(
        "Resume a schedule",
        ("name",),
        lambda p: f"Schedule {p.get('name')} makes tasks again, from its next slot on.",
        _schedule(pause=False),
    ),
}


# --- the application ---------------------------------------------------------------------


@dataclass
class Dashboard:
    """The dashboard over one database: its connection pool, its settings, its app."""

    conninfo: str
    settings: Settings = field(default_factory=Settings)

    def __post_init__(self) -> None:
        security.check_token(self.settings.token)
        security.host_names(self.settings.hosts)  # refused here, before anything is opened
        security.check_proxies(self.settings.trusted_proxies)
        if self.settings.session_lifetime <= timedelta(0):
            raise InvalidConfiguration(
                f"the session lifetime must be positive, got {self.settings.session_lifetime}"
            )
        self.sessions = security.Sessions(self.settings.token or "", self.settings.session_lifetime)
        self.throttle = security.SignInThrottle()
        if not self.settings.allow_privileged_role:
            check_role(self.conninfo)
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.conninfo,
            kwargs=connection_options(application_name="tenure dashboard", deadline=10.0),
            min_size=1,
            max_size=4,
            timeout=POOL_WAIT,
            max_waiting=POOL_WAITING,
            open=True,
            check=ConnectionPool.check_connection,
        )
        environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        environment.globals.update(
            timeline=charts.timeline,
            bars=charts.bars,
            colour=charts.colour,
            task_statuses=data.STATUSES,
            unfinished=data.UNFINISHED,
        )
        environment.filters.update(age=_age, short=_short, when=_when, with_page=_with_page)
        self.templates = Jinja2Templates(env=environment)
        self.app: ASGIApp = Starlette(
            routes=[
                Route("/", self.page(data.overview, "overview.html")),
                Route("/heartbeat", self.page(data.heartbeat, "heartbeat.html")),
                Route("/replicas", self.page(data.replicas, "replicas.html")),
                Route("/claims", self.page(data.claims, "claims.html")),
                Route("/tasks", self.tasks_page),
                Route("/tasks/{task_id}", self.task_page),
                Route("/batches", self.page(data.batches, "batches.html")),
                Route("/schedules", self.page(data.schedules, "schedules.html")),
                Route("/login", self.login, methods=["GET", "POST"]),
                Route("/logout", self.logout, methods=["POST"]),
                Route("/actions/{name}", self.action, methods=["GET", "POST"]),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
            ],
            exception_handlers={
                404: self.not_found,
                PoolTimeout: self.busy,
                TooManyRequests: self.busy,
                psycopg.errors.QueryCanceled: self.busy,
            },
        )
        self.app = security.Guard(self.app, hosts=self.settings.hosts)

    def close(self) -> None:
        self.pool.close()

    # --- reading ---

    def read(self, read: Callable[[data.Reader], dict[str, Any]], *, page: int = 1) -> dict[str, Any]:
        with self.pool.connection() as connection:
            return data.snapshot(connection, read, page=page)

    def render(
        self, request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
    ) -> Response:
        if _wants_json(request):
            return JSONResponse(plain(context.get("data", context)), status_code=status_code)
        session = self._session(request)
        return self.templates.TemplateResponse(
            request,
            template,
            {
                "settings": self.settings,
                "actions": self.settings.token is not None,
                "signed_in": session is not None,
                "csrf": self.sessions.csrf(session) if session else "",
                "flash": request.query_params.get("flash", ""),
                "flash_ok": request.query_params.get("ok", "1") == "1",
                "refresh": 0,  # only the pages that show data reload themselves
                "path": request.url.path,
                "query": request.url.query,
                **context,
            },
            status_code=status_code,
        )

    def error(self, request: Request, status_code: int, message: str) -> Response:
        if _wants_json(request):
            return JSONResponse({"error": message}, status_code=status_code)
        busy = status_code == 503  # the page reloads itself, backing off (refresh.js)
        return self.render(
            request,
            "error.html",
            {
                "message": message,
                "status": status_code,
                "busy": busy,
                "refresh": self.settings.refresh if busy else 0,
            },
            status_code=status_code,
        )

    def page(
        self, area: Callable[[data.Reader, timedelta], dict[str, Any]], template: str
    ) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                window = data.window_of(request.query_params.get("window"), self.settings.window)
                page = data.page_of(request.query_params.get("page"))
            except ValueError as bad:
                return self.error(request, 400, str(bad))
            found = self.read(lambda reader: area(reader, window), page=page)
            return self.render(
                request, template, {"data": found, "window": window, "refresh": self.settings.refresh}
            )

        return endpoint

    def tasks_page(self, request: Request) -> Response:
        kind = request.query_params.get("kind") or None
        try:
            window = data.window_of(request.query_params.get("window"), self.settings.window)
            page = data.page_of(request.query_params.get("page"))
            status = data.status_of(request.query_params.get("status"))
        except ValueError as bad:
            return self.error(request, 400, str(bad))
        found = self.read(lambda reader: data.tasks(reader, window, kind=kind, status=status), page=page)
        return self.render(
            request, "tasks.html", {"data": found, "window": window, "refresh": self.settings.refresh}
        )

    def task_page(self, request: Request) -> Response:
        text = request.path_params["task_id"]
        try:
            task_id = uuid.UUID(text)
        except ValueError:
            return self.error(request, 400, f"not a task id (a UUID): {text!r}")
        try:
            page = data.page_of(request.query_params.get("page"))
        except ValueError as bad:
            return self.error(request, 400, str(bad))
        try:
            found = self.read(lambda reader: data.task(reader, task_id), page=page)
        except data.NotFound as missing:
            return self.error(request, 404, str(missing))
        return self.render(
            request,
            "task.html",
            {"data": found, "window": self.settings.window, "refresh": self.settings.refresh},
        )

    def not_found(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 404, f"no page at {request.url.path}")

    def busy(self, request: Request, exc: Exception) -> Response:
        """Every connection of the pool is taken and enough requests wait for one, or the page
        took longer than data.PAGE_SECONDS: 503, and the page's reload backs off (refresh.js)
        instead of piling on."""
        why = (
            f"the page took longer than {data.PAGE_SECONDS:g} s"
            if isinstance(exc, psycopg.errors.QueryCanceled)
            else "every database connection is in use"
        )
        response = self.error(request, 503, f"busy: {why}; retry in {RETRY_AFTER} s")
        response.headers["Retry-After"] = str(RETRY_AFTER)
        return response

    # --- signing in ---

    def _session(self, request: Request) -> str | None:
        """The id of a valid, live session from the sign-in cookie, else None."""
        if self.settings.token is None:
            return None
        return self.sessions.check(request.cookies.get(COOKIE, ""))

    def _bearer(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return (
            self.settings.token is not None
            and scheme.lower() == "bearer"
            and hmac.compare_digest(given.strip().encode(), self.settings.token.encode())
        )

    async def login(self, request: Request) -> Response:
        if self.settings.token is None:
            return self.error(request, 403, "read-only: this dashboard was started without --token")
        target = _local(request.query_params.get("next", "/"))
        if request.method == "GET":
            return self.render(request, "login.html", {"next": target, "wrong": False})
        refused = security.cross_origin(request.headers, cookie_based=False)
        if refused is not None:
            return self.error(request, 403, refused)
        address = request.client.host if request.client else ""
        wait = self.throttle.wait(address)
        if wait > 0:
            response = self.error(
                request, 429, f"too many wrong tokens from {address}: try again in {wait:.0f} s"
            )
            response.headers["retry-after"] = security.retry_after(wait)
            return response
        form = await request.form()
        given = str(form.get("token", ""))
        if not hmac.compare_digest(given.encode(), self.settings.token.encode()):
            self.throttle.failed(address)
            return self.render(request, "login.html", {"next": target, "wrong": True}, status_code=403)
        self.throttle.succeeded(address)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            self.sessions.issue(),
            max_age=int(self.settings.session_lifetime.total_seconds()),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        refused = security.cross_origin(request.headers, cookie_based=True)
        if refused is not None:
            return self.error(request, 403, refused)
        session = self._session(request)
        if session is not None:
            form = await request.form()
            if not self.sessions.csrf_matches(session, str(form.get("csrf", ""))):
                return self.error(
                    request, 403, "refused: the form's CSRF token is missing or wrong; reload the page"
                )
            self.sessions.revoke(session)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # --- acting ---

    def _run(self, action: Action, params: dict[str, str]) -> Outcome:
        with self.pool.connection() as connection:
            return action.run(Driver(connection), params)

    async def action(self, request: Request) -> Response:
        name = request.path_params["name"]
        action = ACTIONS.get(name)
        if action is None:
            return self.error(
                request, 404, f"no action {name!r}; the actions are {', '.join(sorted(ACTIONS))}"
            )
        if self.settings.token is None:
            return self.error(request, 403, "read-only: this dashboard was started without --token")
        session = self._session(request)
        if request.method == "GET":
            params = {k: request.query_params[k] for k in action.fields if k in request.query_params}
            if session is None:
                here = f"{request.url.path}?{urlencode(params)}"
                return RedirectResponse(f"/login?{urlencode({'next': here})}", status_code=303)
            return self.render(
                request,
                "confirm.html",
                {"name": name, "action": action, "params": params, "explain": action.explain(params)},
            )
        form = await request.form()
        params = {k: str(form[k]) for k in action.fields if k in form}
        bearer = self._bearer(request)
        refused = security.cross_origin(request.headers, cookie_based=not bearer)
        if refused is not None:
            return self.error(request, 403, refused)
        if not bearer:
            if session is None:
                return self.error(request, 403, "refused: sign in with the dashboard's token first")
            if not self.sessions.csrf_matches(session, str(form.get("csrf", ""))):
                return self.error(
                    request, 403, "refused: the form's CSRF token is missing or wrong; reload the page"
                )
        try:
            outcome = await run_in_threadpool(self._run, action, params)
        except BadInput as bad:
            return self.error(request, 400, f"{name}: {bad}")
        except TenureError as refused:
            return self.error(request, 400, f"{name}: {refused}")
        if _wants_json(request):
            return JSONResponse(
                {"action": name, "ok": outcome.ok, "message": outcome.message},
                status_code=200 if outcome.ok else 409,
            )
        query = urlencode({"flash": outcome.message, "ok": "1" if outcome.ok else "0"})
        joint = "&" if "?" in outcome.back else "?"
        return RedirectResponse(f"{outcome.back}{joint}{query}", status_code=303)


def _wants_json(request: Request) -> bool:
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _local(target: str) -> str:
    """Only a path of this site is a place to go back to after signing in."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


def _age(value: timedelta | None) -> str:
    if value is None:
        return "-"
    seconds = value.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 120:
        return f"{sign}{seconds:.1f} s"
    if seconds < 7200:
        return f"{sign}{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{sign}{seconds / 3600:.1f} h"
    return f"{sign}{seconds / 86400:.1f} d"


def _with_page(query: str, page: int) -> str:
    """The query string ``query`` asking for list page ``page`` instead."""
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "page"]
    return urlencode([*params, ("page", str(page))])


def _short(value: object) -> str:
    return "-" if value is None else str(value)[:8]


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def dumps(value: Any) -> str:
    return json.dumps(plain(value))
