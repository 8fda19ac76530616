"""Fixtures: a database with tenure deployed, fresh for every test.

pytest-postgresql's ``postgresql_noproc`` points at the throwaway cluster that
``make test`` started (PGHOST/PGPORT), or, when pytest runs alone, at one this
conftest starts with scripts/pgcluster.sh and stops at exit. The template database
is deployed once with sqitch; each test gets a copy.

The tests on real engines (Patroni + etcd, pgbouncer) use the fixtures ``needs_patroni``
and ``needs_pgbouncer``, the examples in other languages ``needs_node`` and ``needs_java``:
without the programs they skip, or fail when CI is set, so a broken install never passes
silently; :func:`harness_logs` adds a harness's logs to the
report of every test that fails while it runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories

from tenure.bench.peers import default_peers_python
from tenure.testing import patroni, procs
from tenure.testing.aio import FLAVOURS, Flavour
from tenure.testing.aio import flavour as make_flavour
from tenure.testing.database import setup

ROOT = Path(__file__).resolve().parents[2]
JDBC_JAR = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java


def _cluster() -> tuple[str, int, str]:
    if os.environ.get("PGHOST") and os.environ.get("PGPORT"):
        return os.environ["PGHOST"], int(os.environ["PGPORT"]), os.environ.get("PGUSER", "postgres")
    directory = tempfile.mkdtemp(prefix="tenure-pytest-pg.")
    os.chmod(directory, 0o755)
    script = str(ROOT / "scripts" / "pgcluster.sh")
    subprocess.run([script, "start", directory], check=True, stdout=subprocess.DEVNULL)
    atexit.register(subprocess.run, [script, "stop", directory], check=False)
    for line in Path(directory, "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        os.environ[key] = value
    return os.environ["PGHOST"], int(os.environ["PGPORT"]), os.environ["PGUSER"]


HOST, PORT, USER = _cluster()


def deploy_tenure(*, host: str, port: int, user: str, dbname: str, **_: Any) -> None:
    env = dict(os.environ, SQITCH_FULLNAME="tenure tests", SQITCH_EMAIL="tests@localhost")
    subprocess.run(
        ["sqitch", "--quiet", "deploy", "--verify", f"db:pg://{user}@{host}:{port}/{dbname}"],
        cwd=ROOT,
        env=env,
        check=True,
    )


tenure_noproc = factories.postgresql_noproc(
    host=HOST, port=PORT, user=USER, dbname="tenure_test", load=[deploy_tenure]
)
tenure_db = factories.postgresql("tenure_noproc")


@pytest.fixture
def admin_conninfo(tenure_db: psycopg.Connection[Any]) -> str:
    """Superuser conninfo of this test's database (reads tenure's tables, as operators do)."""
    info = tenure_db.info
    return make_conninfo(host=info.host, port=info.port, user=info.user, dbname=info.dbname)


@pytest.fixture
def admin(tenure_db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """An autocommit superuser connection to this test's database."""
    tenure_db.autocommit = True
    return tenure_db


@pytest.fixture
def app_conninfo(admin_conninfo: str) -> str:
    """Conninfo of a login role that is a member of tenure_worker and nothing more."""
    return setup(admin_conninfo)


@pytest.fixture
def connect(admin_conninfo: str) -> Iterator[Any]:
    """Open extra autocommit connections (as the superuser by default); all closed afterwards."""
    opened: list[psycopg.Connection[Any]] = []

    def open_connection(conninfo: str | None = None) -> psycopg.Connection[Any]:
        connection = psycopg.connect(conninfo or admin_conninfo, autocommit=True)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        connection.close()


def _require(*programs: str, path: str | None = None, files: tuple[Path, ...] = ()) -> None:
    missing = procs.missing_programs(*programs, path=path) + [str(f) for f in files if not f.exists()]
    if not missing:
        return
    message = f"{', '.join(missing)} missing: run scripts/install-deps.sh"
    if procs.under_ci():
        pytest.fail(f"{message} (CI is set: a missing install fails the tests)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def peers_python() -> str:
    """The interpreter of the bench's peers (.venv-peers); skip (fail under CI) without it."""
    python = default_peers_python()
    if not Path(python).exists():
        message = f"no peers' interpreter at {python}: run scripts/install-peers.sh (make test does)"
        if procs.under_ci():
            pytest.fail(f"{message} (CI is set: a missing install fails the tests)")
        pytest.skip(message)
    return python


@pytest.fixture(scope="session")
def needs_patroni() -> None:
    """Skip (fail under CI) without Patroni and etcd."""
    _require(*patroni.BINARIES)


@pytest.fixture(scope="session")
def needs_pgbouncer() -> None:
    """Skip (fail under CI) without pgbouncer."""
    _require("pgbouncer", path="/usr/sbin:/usr/bin")


@pytest.fixture(scope="session")
def needs_node() -> None:
    """Skip (fail under CI) without Node.js and the examples' node_modules."""
    _require("node", files=(ROOT / "examples" / "node" / "node_modules" / "pg",))


@pytest.fixture(scope="session")
def needs_java() -> None:
    """Skip (fail under CI) without javac and Debian's JDBC driver."""
    _require("javac", "java", files=(JDBC_JAR,))


class FailureLogs:
    """A pytest plugin that adds ``logs()`` to the report of every test that fails while it
    is registered (see :func:`harness_logs`)."""

    def __init__(self, logs: Callable[[], str], title: str) -> None:
        self.logs = logs
        self.title = title

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if report.failed:
            report.sections.append((self.title, self.logs()))
        return report


@contextlib.contextmanager
def harness_logs(request: pytest.FixtureRequest, logs: Callable[[], str], title: str) -> Iterator[None]:
    """Within the block, a failing test's report carries ``logs()``; a module fixture holds it
    for as long as its harness lives:

        with PatroniCluster() as cluster, harness_logs(request, cluster.log_tails, "patroni logs"):
            yield cluster
    """
    request.config.pluginmanager.register(FailureLogs(logs, title), title)
    try:
        yield
    finally:
        request.config.pluginmanager.unregister(name=title)


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> Iterator[Flavour]:
    """Each runtime test runs twice: the sync runtime and its asyncio twin (``flavour(Elector, ...)``)."""
    with make_flavour(request.param) as made:
        yield made
