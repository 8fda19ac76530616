"""Smoke tests of the pgbouncer harness (tenure.testing.pgbouncer) in front of the tests' plain cluster."""

from __future__ import annotations

import psycopg
import pytest
from conftest import HOST, PORT, USER

from tenure.testing import procs
from tenure.testing.pgbouncer import PgBouncer

pytestmark = pytest.mark.usefixtures("needs_pgbouncer")


def test_a_query_through_transaction_pooling() -> None:
    with PgBouncer(upstream_host=HOST, upstream_port=PORT, users=[USER]) as bouncer:
        with psycopg.connect(
            bouncer.conninfo("postgres", user=USER, options="-c statement_timeout=5000"),
            prepare_threshold=None,
            autocommit=True,
        ) as connection:
            assert connection.execute("SELECT %s::int + 1", [41]).fetchone() == (42,)
        pools = bouncer.admin("SHOW POOLS")
        assert any(row[0] == "postgres" for row in pools)
        config = {row[0]: row[1] for row in bouncer.admin("SHOW CONFIG")}
        assert config["pool_mode"] == "transaction"
        directory = bouncer.directory
    assert not directory.exists()
    assert not procs.processes_of(directory)


def test_without_ignore_startup_parameters_options_is_refused() -> None:
    with PgBouncer(
        upstream_host=HOST, upstream_port=PORT, users=[USER], ignore_startup_parameters=None
    ) as bouncer:
        with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter: options"):
            psycopg.connect(bouncer.conninfo("postgres", user=USER, options="-c statement_timeout=5000"))
        with psycopg.connect(bouncer.conninfo("postgres", user=USER), prepare_threshold=None) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
