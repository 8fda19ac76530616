"""tenure dashboard against a live workload (electors, claimers, a task worker on threads; a
dead task, a halted batch key, a schedule), in a real browser (Debian's chromium through
its chromedriver, headless) and over plain HTTP: every page opens and is screenshotted,
an action goes through sign-in and confirmation and changes the database, actions are
refused without the token or without the CSRF field, and what users name is escaped.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from tenure.cli import main as cli_main
from tenure.dashboard import DashboardServer, Settings, data
from tenure.dashboard.role import check_role, role_problems
from tenure.driver import Driver
from tenure.errors import InvalidConfiguration
from tenure.testing import procs
from tenure.testing.database import APP_ROLE

EVIL = "<script>alert(1)</script>"
TOKEN = "s3cret-token-of-the-operator"
PAGES = ("/", "/heartbeat", "/replicas", "/claims", "/tasks", "/batches", "/schedules")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@dataclass
class Workload:
    dead_task: uuid.UUID
    halted_batch: uuid.UUID
    waiting_task: uuid.UUID
    stop: threading.Event


def _live(conninfo: str, stop: threading.Event, ready: threading.Event) -> None:
    """Two electors per service type, two claimers per keyspace and a task worker, every 0.1 s."""
    electors = [uuid.uuid4(), uuid.uuid4()]
    claimers = [uuid.uuid4(), uuid.uuid4()]
    worker = uuid.uuid4()
    with psycopg.connect(conninfo, autocommit=True) as connection:
        driver = Driver(connection)
        rounds = 0
        while not stop.is_set():
            for utype in ("scheduler", EVIL):
                for instance in electors:
                    driver.update_heartbeat(instance, utype, timeout=2.0, interval=0.1)
            for keyspace in ("accounts", EVIL):
                for instance in claimers:
                    driver.claim_renew(keyspace, instance, expiry=2.0)
                    driver.claim_take(keyspace, instance, expiry=2.0)
            if rounds % 3 == 0:
                driver.task_enqueue("email", {"n": rounds})
            for lease in driver.task_acquire(worker, lease=5.0, kinds=["email"], limit=5):
                driver.task_complete(lease.id, worker, lease.epoch)
            rounds += 1
            if rounds == 3:
                ready.set()
            stop.wait(0.1)


@pytest.fixture
def workload(admin: psycopg.Connection[Any], app_conninfo: str) -> Iterator[Workload]:
    driver = Driver(admin)
    driver.claim_register("accounts", [f"account-{i}" for i in range(6)])
    driver.claim_register(EVIL, [EVIL, "plain"])
    # A task of a kind with a hostile name that died with a hostile error.
    enqueued = driver.task_enqueue(EVIL, {"why": EVIL}, max_attempts=1)
    owner = uuid.uuid4()
    (lease,) = driver.task_acquire(owner, lease=30, kinds=[EVIL])
    driver.task_fail(lease.id, owner, lease.epoch, error=f"boom {EVIL}")
    # A batch queue whose key `ledger-1` is halted by an invalid batch.
    driver.batch_configure("ledger", mode="serial")
    submitter = uuid.uuid4()
    first = driver.batch_enqueue("ledger", "ledger-1", b"one")
    driver.batch_enqueue("ledger", "ledger-1", b"two")
    driver.batch_enqueue("ledger", "ledger-2", b"three")
    driver.claim_take("ledger", submitter, expiry=3600)
    for grant in driver.batch_select("ledger", submitter, limit=10):
        status = "invalid" if grant.id == first.id else "committed"
        driver.batch_resolve("ledger", submitter, grant.id, grant.claim_epoch, status, f"rejected: {EVIL}")
    driver.schedule_set("nightly-report", "report", every=3600)
    driver.replica_register(counter=7)
    # A paused kind with a hostile name, and a task of it waiting for another (nobody works
    # on kind build) under a hostile limit key.
    driver.task_kind_set(EVIL, paused=True, max_running=3)
    build = driver.task_enqueue("build", {"n": 1})
    waiting = driver.task_enqueue(EVIL, {"n": 2}, priority=7, limit_key=EVIL, after=[build.id])
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=_live, args=(app_conninfo, stop, ready), daemon=True)
    thread.start()
    assert ready.wait(20), "the workload did not start"
    yield Workload(dead_task=enqueued.id, halted_batch=first.id, waiting_task=waiting.id, stop=stop)
    stop.set()
    thread.join(10)


@pytest.fixture
def dashboard(app_conninfo: str, workload: Workload) -> Iterator[DashboardServer]:
    with DashboardServer(app_conninfo, settings=Settings(token=TOKEN, refresh=0)) as server:
        yield server


@contextlib.contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """Debian's chromium, headless, its console kept (CSP violations show there)."""
    missing = procs.missing_programs(CHROMIUM, CHROMEDRIVER)
    if missing:
        message = f"{', '.join(missing)} missing: run scripts/install-deps.sh"
        if procs.under_ci():
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # set explicitly: Selenium Manager must not download a browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium leaves an org.chromium.Chromium.* folder in its TMPDIR after quit(): keep it in one
    # that goes with the test.
    with tempfile.TemporaryDirectory(prefix="tenure-test-chromium-") as scratch:
        service = Service(executable_path=CHROMEDRIVER, env=dict(os.environ, TMPDIR=scratch))
        chrome = webdriver.Chrome(options=options, service=service)
        try:
            yield chrome
        finally:
            chrome.quit()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as chrome:
        yield chrome


def csp_violations(chrome: webdriver.Chrome) -> list[str]:
    """The browser console's CSP complaints since the last call (reading the log empties it)."""
    entries: list[dict[str, Any]] = chrome.get_log("browser")  # type: ignore[no-untyped-call]
    return [str(e["message"]) for e in entries if "Content Security Policy" in str(e["message"])]


def _follow(chrome: webdriver.Chrome, element: WebElement) -> None:
    """Click a link or a submit button and wait for the next page: a click returns before
    the browser has loaded it, and the old page's elements would answer meanwhile."""
    element.click()
    WebDriverWait(chrome, 30).until(lambda _: _left_the_page(element))


def _left_the_page(element: WebElement) -> bool:
    """Whether the page that held ``element`` is gone. Chromium says so either as a stale
    element or, in the middle of the navigation, as "Node with given id does not belong to
    the document" (which ``staleness_of`` does not take for staleness)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in str(error):
            return True
        raise
    return False


def _no_alert(chrome: webdriver.Chrome) -> None:
    try:
        alert = chrome.switch_to.alert
    except NoAlertPresentException:
        return
    raise AssertionError(f"a script ran and raised an alert: {alert.text!r}")


def _status(admin: psycopg.Connection[Any], task_id: uuid.UUID) -> str:
    row = admin.execute("SELECT status FROM tenure.task WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_every_page_opens_in_a_browser_with_names_as_text(
    dashboard: DashboardServer, browser: webdriver.Chrome, workload: Workload, tmp_path: Path
) -> None:
    for path in (
        *PAGES,
        "/tasks?status=waiting",
        f"/tasks/{workload.dead_task}",
        f"/tasks/{workload.waiting_task}",
    ):
        browser.get(dashboard.url + path)
        _no_alert(browser)
        name = path.strip("/").replace("/", "-") or "overview"
        assert browser.save_screenshot(str(tmp_path / f"{name}.png"))
        assert browser.title.startswith("tenure · ") and not browser.find_elements(By.ID, "error"), path
        assert not browser.find_elements(By.CSS_SELECTOR, "main script"), (
            f"{path}: a script element in the page"
        )
        assert not csp_violations(browser), path
    # Each hostile name shows as text where it is named, and no script runs.
    expected = {
        "/heartbeat": "#types",
        "/claims": "#keyspaces",
        "/tasks": "#dead",
        "/tasks?status=waiting": "#task-list",
        "/batches": "#halted",
        f"/tasks/{workload.dead_task}": "#task",
        f"/tasks/{workload.waiting_task}": "#task",
    }
    for path, table in expected.items():
        browser.get(dashboard.url + path)
        _no_alert(browser)
        assert EVIL in browser.find_element(By.CSS_SELECTOR, table).text, path
    browser.get(dashboard.url + "/")
    problems = browser.find_element(By.ID, "problems").text
    assert "1 dead tasks" in problems and "1 batch keys halted" in problems
    assert "replica lock " in problems  # the registered lock nobody holds
    assert browser.find_element(By.ID, "paused-kinds").text == f"1 kinds paused: {EVIL}"
    browser.get(dashboard.url + "/tasks")
    paused = browser.find_element(By.CSS_SELECTOR, "#kinds tr.paused").text
    assert EVIL in paused and "PAUSED" in paused and "0 / 3" in paused


def test_requeue_a_dead_task_through_sign_in_and_confirmation(
    dashboard: DashboardServer,
    browser: webdriver.Chrome,
    workload: Workload,
    admin: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    assert _status(admin, workload.dead_task) == "dead"
    browser.get(dashboard.url + "/tasks")
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "#dead a.requeue"))
    # Not signed in yet: the sign-in page, then back to the confirmation.
    browser.find_element(By.ID, "token").send_keys("wrong")
    _follow(browser, browser.find_element(By.ID, "sign-in"))
    assert "not the dashboard's token" in browser.find_element(By.TAG_NAME, "main").text
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    _follow(browser, browser.find_element(By.ID, "sign-in"))
    assert str(workload.dead_task) in browser.find_element(By.ID, "explain").text
    assert _status(admin, workload.dead_task) == "dead", "the confirmation page itself changes nothing"
    browser.save_screenshot(str(tmp_path / "confirm.png"))
    _follow(browser, browser.find_element(By.ID, "confirm"))
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#flash, #error"))
    _no_alert(browser)
    assert not browser.find_elements(By.ID, "error"), browser.find_element(By.ID, "error").text
    assert _status(admin, workload.dead_task) == "pending"
    assert browser.current_url.startswith(f"{dashboard.url}/tasks/{workload.dead_task}")
    assert f"task {workload.dead_task} requeued" in browser.find_element(By.ID, "flash").text
    assert browser.find_element(By.ID, "task-status").text.startswith("pending")
    browser.save_screenshot(str(tmp_path / "requeued.png"))


def test_actions_are_refused_without_the_token_or_the_csrf_field(
    dashboard: DashboardServer, workload: Workload, admin: psycopg.Connection[Any], app_conninfo: str
) -> None:
    form = {"id": str(workload.dead_task)}
    with httpx.Client(base_url=dashboard.url, headers={"Origin": dashboard.url}) as client:
        refused = client.post("/actions/task-requeue", data=form)
        assert refused.status_code == 403 and "sign in" in refused.text
        assert (
            client.post(
                "/actions/task-requeue", data=form, headers={"Authorization": "Bearer nope"}
            ).status_code
            == 403
        )
        # Signed in, but the form lacks the CSRF field (a forged cross-site post): refused.
        signed = client.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303 and client.cookies.get("tenure_dashboard")
        forged = client.post("/actions/task-requeue", data={**form, "csrf": "forged"})
        assert forged.status_code == 403 and "CSRF" in forged.text
        assert _status(admin, workload.dead_task) == "dead"
        # Bad input: a clear error naming it, nothing changed.
        bad = client.post(
            "/actions/task-requeue",
            data={"id": "not-a-uuid"},
            headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"},
        )
        assert bad.status_code == 400
        assert bad.json() == {"error": "task-requeue: id must be a UUID, got 'not-a-uuid'"}
        assert client.get("/actions/no-such-action").status_code == 404
        # A script with the token as a bearer needs no CSRF field.
        done = client.post(
            "/actions/task-requeue",
            data=form,
            headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"},
        )
        assert done.status_code == 200 and done.json()["ok"] is True
        assert _status(admin, workload.dead_task) == "pending"
        again = client.post(
            "/actions/task-requeue",
            data=form,
            headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"},
        )
        assert again.status_code == 409 and "is not dead" in again.json()["message"]
    # Started without a token, the dashboard is read-only: no action, even with a bearer.
    with (
        DashboardServer(app_conninfo, settings=Settings(refresh=0)) as read_only,
        httpx.Client(base_url=read_only.url) as client,
    ):
        assert client.post("/actions/schedule-pause", data={"name": "nightly-report"}).status_code == 403
        assert client.get("/actions/schedule-pause?name=nightly-report").status_code == 403
        assert client.post("/login", data={"token": TOKEN}).status_code == 403
        assert "requeue" not in client.get("/tasks").text
    paused = admin.execute("SELECT paused FROM tenure.schedules WHERE name = 'nightly-report'").fetchone()
    assert paused == (False,)


def test_every_page_is_json_at_the_same_path(dashboard: DashboardServer, workload: Workload) -> None:
    with httpx.Client(base_url=dashboard.url) as client:
        for path in (*PAGES, f"/tasks/{workload.dead_task}"):
            by_query = client.get(path, params={"format": "json"})
            by_header = client.get(path, headers={"Accept": "application/json"})
            assert by_query.status_code == by_header.status_code == 200, path
            assert by_query.headers["content-type"] == "application/json"
            assert set(by_query.json()) == set(by_header.json()), path
            # A column named like a dict method (keys) must show its value, not the method.
            assert "built-in method" not in client.get(path).text, path
        overview = client.get("/", params={"format": "json"}).json()
        assert overview["tasks"]["dead"] == 1 and overview["batches"]["halted_keys"] == 1
        assert "3 keyspaces, 10 keys: " in client.get("/").text
        tasks = client.get("/tasks", params={"format": "json"}).json()
        (dead,) = tasks["dead"]
        assert dead["id"] == str(workload.dead_task) and dead["kind"] == EVIL
        assert any(row["grp"] == "acquired" for row in tasks["leases"])
        heartbeat = client.get("/heartbeat", params={"format": "json"}).json()
        assert {t["utype"] for t in heartbeat["types"]} == {"scheduler", EVIL}
        assert all(t["live"] for t in heartbeat["types"])
        batches = client.get("/batches", params={"format": "json"}).json()
        (halted,) = batches["halted"]
        assert halted["id"] == str(workload.halted_batch) and halted["key"] == "ledger-1"
        one = client.get(f"/tasks/{workload.dead_task}", params={"format": "json"}).json()
        assert [lease["epoch"] for lease in one["leases"]] == [1]
        # What a user names wrongly gets a clear error.
        assert client.get("/tasks/xyz", params={"format": "json"}).json() == {
            "error": "not a task id (a UUID): 'xyz'"
        }
        missing = uuid.uuid4()
        assert client.get(f"/tasks/{missing}").status_code == 404
        assert "window must be" in client.get("/tasks", params={"window": "5"}).text
        assert client.get("/nowhere").status_code == 404


def test_the_html_carries_every_name_escaped(dashboard: DashboardServer, workload: Workload) -> None:
    """The HTML itself carries every hostile name escaped (the browser test sees the text)."""
    with httpx.Client(base_url=dashboard.url) as client:
        for path in (
            "/heartbeat",
            "/claims",
            "/tasks",
            "/tasks?status=waiting",
            "/batches",
            f"/tasks/{workload.dead_task}",
            f"/tasks/{workload.waiting_task}",
        ):
            html = client.get(path).text
            assert EVIL not in html, path
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path


@dataclass
class Controls:
    parent: uuid.UUID  # pending, of kind build
    children: list[uuid.UUID]  # waiting for parent, of kind deploy
    leased: uuid.UUID  # of kind mail, leased
    cancelled: uuid.UUID


@pytest.fixture
def controls(admin: psycopg.Connection[Any]) -> Controls:
    """Kind mail limited (and one of its tasks leased), kind deploy paused, three tasks
    waiting for one, a cancelled task."""
    driver = Driver(admin)
    driver.task_kind_set("mail", max_running=2, max_running_per_key=1, rate=10, rate_period=60)
    driver.task_kind_set("deploy", paused=True)
    leased = driver.task_enqueue("mail", {"to": "a"}, limit_key="customer-1", priority=5)
    driver.task_enqueue("mail", {"to": "b"}, limit_key="customer-1")
    (lease,) = driver.task_acquire(uuid.uuid4(), lease=300, kinds=["mail"], limit=5)
    assert lease.id == leased.id
    parent = driver.task_enqueue("build", {"n": 1})
    children = [
        driver.task_enqueue("deploy", {"n": n}, priority=n, limit_key=f"env-{n}", after=[parent.id]).id
        for n in range(3)
    ]
    cancelled = driver.task_enqueue("build", {"n": 2})
    assert driver.task_cancel(cancelled.id)
    return Controls(parent=parent.id, children=children, leased=leased.id, cancelled=cancelled.id)


@pytest.fixture
def quiet_dashboard(app_conninfo: str) -> Iterator[DashboardServer]:
    """A dashboard with actions over a database nobody else works on."""
    with DashboardServer(app_conninfo, settings=Settings(token=TOKEN, refresh=0)) as server:
        yield server


def test_kinds_new_statuses_priority_and_dependencies_show(
    quiet_dashboard: DashboardServer, controls: Controls, monkeypatch: pytest.MonkeyPatch
) -> None:
    with httpx.Client(base_url=quiet_dashboard.url, params={"format": "json"}) as client:
        kinds = {k["kind"]: k for k in client.get("/tasks").json()["kinds"]}
        assert set(kinds) == {"mail", "deploy"}
        mail, deploy = kinds["mail"], kinds["deploy"]
        assert (mail["paused"], mail["max_running"], mail["running"]) == (False, 2, 1)
        assert (mail["max_running_per_key"], mail["rate"], mail["rate_period"], mail["rate_used"]) == (
            1,
            10,
            60.0,
            1,
        )
        assert deploy["paused"] is True
        waiting = client.get("/tasks", params={"status": "waiting"}).json()["list"]
        # In the order they would be leased: highest priority first.
        assert [t["id"] for t in waiting] == [str(c) for c in reversed(controls.children)]
        assert [(t["priority"], t["limit_key"], t["after_left"]) for t in waiting] == [
            (2, "env-2", 1),
            (1, "env-1", 1),
            (0, "env-0", 1),
        ]
        (cancelled,) = client.get("/tasks", params={"status": "cancelled"}).json()["list"]
        assert cancelled["id"] == str(controls.cancelled) and cancelled["finished_at"] is not None
        assert client.get("/tasks").json()["list"] == []  # no list unless a status is asked for
        statuses = {(r["kind"], r["status"]) for r in client.get("/tasks").json()["status"]}
        assert {("deploy", "waiting"), ("build", "cancelled")} <= statuses
        bad = client.get("/tasks", params={"status": "stuck"})
        assert bad.status_code == 400
        assert bad.json() == {
            "error": "status must be one of pending, waiting, done, dead, cancelled, got 'stuck'"
        }
        child = client.get(f"/tasks/{controls.children[1]}").json()
        assert (child["task"]["status"], child["task"]["priority"], child["task"]["limit_key"]) == (
            "waiting",
            1,
            "env-1",
        )
        assert child["after"] == [
            {"id": str(controls.parent), "kind": "build", "status": "pending", "finished_at": None}
        ]
        assert child["dependents"] == []
        parent = client.get(f"/tasks/{controls.parent}").json()
        assert parent["after"] == []
        assert [d["id"] for d in parent["dependents"]] == sorted(str(c) for c in controls.children)
        assert {d["status"] for d in parent["dependents"]} == {"waiting"}
        overview = client.get("/").json()
        assert overview["tasks"]["waiting"] == 3
        assert overview["task_kinds"] == {"kinds": 2, "paused": 1, "paused_kinds": ["deploy"], "at_limit": 0}
        # Each list stays one page: the dependents and the waiting tasks, two rows a page.
        monkeypatch.setattr(data, "PAGE_SIZE", 2)
        first = client.get(f"/tasks/{controls.parent}").json()
        second = client.get(f"/tasks/{controls.parent}", params={"page": 2}).json()
        assert len(first["dependents"]) == 2 and first["page"]["more"] is True
        assert len(second["dependents"]) == 1 and second["page"]["more"] is False
        shown = [d["id"] for d in first["dependents"] + second["dependents"]]
        assert shown == sorted(str(c) for c in controls.children)
        assert len(client.get("/tasks", params={"status": "waiting"}).json()["list"]) == 2
        # The HTML says it plainly.
        client.params = httpx.QueryParams()
        html = client.get("/tasks").text
        assert '<tr class="paused">' in html and "PAUSED" in html
        assert "1 / 2" in html and "1 / 10 per 60.0 s" in html
        assert 'href="/actions/kind-resume?kind=deploy"' in html  # offered; it asks to sign in first
        task_html = client.get(f"/tasks/{controls.children[0]}").text
        assert (
            'id="task-limit-key">env-0<' in task_html
            and "waiting for 1 of the tasks it runs after" in task_html
        )
        assert f'href="/tasks/{controls.parent}"' in task_html
        assert f'href="/actions/task-cancel?id={controls.children[0]}"' in task_html


def _confirm(client: httpx.Client, action: str, **params: str) -> httpx.Response:
    """Open an action's confirmation page and post its form, as the browser does."""
    page = client.get(f"/actions/{action}", params=params)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert found, "no CSRF value on the confirmation page"
    return client.post(f"/actions/{action}", data={**params, "csrf": found[1]})


def _kind_paused(admin: psycopg.Connection[Any], kind: str) -> bool | None:
    row = admin.execute("SELECT paused FROM tenure.task_kinds WHERE kind = %s", (kind,)).fetchone()
    return None if row is None else bool(row[0])


def test_cancel_a_task_and_pause_and_resume_a_kind(
    quiet_dashboard: DashboardServer, controls: Controls, admin: psycopg.Connection[Any]
) -> None:
    with httpx.Client(base_url=quiet_dashboard.url, headers={"Origin": quiet_dashboard.url}) as client:
        assert client.post("/login", data={"token": TOKEN}).status_code == 303
        # A waiting task: cancelled, and the page says so.
        child = controls.children[0]
        page = client.get(f"/actions/task-cancel?id={child}")
        assert f"Task {child} is cancelled" in page.text and _status(admin, child) == "waiting"
        done = _confirm(client, "task-cancel", id=str(child))
        assert done.status_code == 303 and done.headers["location"].startswith(f"/tasks/{child}?")
        assert _status(admin, child) == "cancelled"
        shown = client.get(done.headers["location"]).text
        assert f"task {child} cancelled" in shown and 'id="cancel"' not in shown
        # Again: nothing to do, said so (409 to a script).
        again = client.post(
            "/actions/task-cancel",
            data={"id": str(child)},
            headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"},
        )
        assert again.status_code == 409
        assert again.json() == {
            "action": "task-cancel",
            "ok": False,
            "message": f"task {child} had already finished: left as it is",
        }
        # A leased task: cancelled too, its epoch over.
        assert _confirm(client, "task-cancel", id=str(controls.leased)).status_code == 303
        assert _status(admin, controls.leased) == "cancelled"
        # The task it names must exist; the id must be one.
        unknown = uuid.uuid4()
        missing = _confirm(client, "task-cancel", id=str(unknown))
        assert missing.status_code == 400 and str(unknown) in missing.text
        assert _confirm(client, "task-cancel", id="x").status_code == 400
        # Cancelling the task the others wait for makes them dead (what the SQL does), shown.
        assert _confirm(client, "task-cancel", id=str(controls.parent)).status_code == 303
        assert {_status(admin, c) for c in controls.children[1:]} == {"dead"}
        # Kinds: resume the paused one, pause one without settings, then resume it.
        resumed = _confirm(client, "kind-resume", kind="deploy")
        assert resumed.status_code == 303 and resumed.headers["location"].startswith("/tasks?kind=deploy&")
        assert _kind_paused(admin, "deploy") is not True
        assert _kind_paused(admin, "build") is None
        assert 'href="/actions/kind-pause?kind=build"' in client.get("/tasks", params={"kind": "build"}).text
        paused = _confirm(client, "kind-pause", kind="build")
        assert paused.status_code == 303 and _kind_paused(admin, "build") is True
        assert "kind build paused" in client.get(paused.headers["location"]).text
        assert _confirm(client, "kind-resume", kind="build").status_code == 303
        assert _kind_paused(admin, "build") is not True
        blank = _confirm(client, "kind-pause", kind=" ")
        assert blank.status_code == 400 and "kind must not be empty" in blank.text


@pytest.fixture
def make_role(admin: psycopg.Connection[Any], admin_conninfo: str) -> Iterator[Any]:
    """Create login roles for one test (roles are the cluster's: dropped afterwards)."""
    made: list[str] = []

    def create(*grants: str) -> str:
        name = f"tenure_dash_{uuid.uuid4().hex[:8]}"
        admin.execute(f"CREATE ROLE {name} LOGIN")
        made.append(name)
        for grant in grants:
            admin.execute(grant.format(role=name))
        return make_conninfo(admin_conninfo, user=name)

    yield create
    for name in reversed(made):
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


def test_a_member_of_tenure_worker_is_all_the_dashboard_needs(app_conninfo: str) -> None:
    with psycopg.connect(app_conninfo) as connection:
        assert role_problems(connection) == (APP_ROLE, [])
    check_role(app_conninfo)  # raises nothing


def test_a_superuser_is_refused_unless_explicitly_allowed(admin_conninfo: str, admin: Any) -> None:
    user = admin.execute("SELECT current_user").fetchone()[0]
    with pytest.raises(InvalidConfiguration) as refused:
        DashboardServer(admin_conninfo, settings=Settings(refresh=0))
    text = str(refused.value)
    assert f"refuses to run as role {user!r}: it is a superuser" in text
    assert "member of tenure_worker" in text and "--allow-privileged-role" in text
    allowed = Settings(refresh=0, allow_privileged_role=True)
    with (
        DashboardServer(admin_conninfo, settings=allowed) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        assert client.get("/").status_code == 200


def test_a_role_that_may_write_tenures_tables_is_refused(make_role: Any) -> None:
    direct = make_role(
        "GRANT tenure_worker TO {role}",
        "GRANT USAGE ON SCHEMA tenure TO {role}",
        "GRANT UPDATE, DELETE ON tenure.task TO {role}",
    )
    with pytest.raises(InvalidConfiguration) as refused:
        check_role(direct)
    assert "may write tenure's tables directly: UPDATE on tenure.task, DELETE on tenure.task" in str(
        refused.value
    )
    # Through a role it is a member of, too: named.
    writer = make_role("GRANT INSERT ON tenure.heartbeat TO {role}")
    writer_name = conninfo_to_dict(writer)["user"]
    member = make_role(f"GRANT {writer_name} TO {{role}}", "GRANT tenure_worker TO {role}")
    with pytest.raises(InvalidConfiguration) as refused:
        check_role(member)
    assert f"(through its membership in {writer_name}): INSERT on tenure.heartbeat" in str(refused.value)


def test_the_command_refuses_a_privileged_role_before_it_listens(admin_conninfo: str, capsys: Any) -> None:
    assert cli_main(["dashboard", "--db", admin_conninfo, "--http", "127.0.0.1:0"]) == 2
    captured = capsys.readouterr()
    assert "it is a superuser" in captured.err and "--allow-privileged-role" in captured.err
    assert "tenure dashboard at" not in captured.out
