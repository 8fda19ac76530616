"""The database side of the demos, tests and bench: the application's login role and
tables, the server's clock, and clean-up between runs."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from tenure.driver import Driver
from tenure.errors import InvalidArgument

APP_ROLE = "tenure_demo_app"


def worker_login_role_sql(role: str) -> str:
    """SQL that creates ``role`` (a plain lower-case name), a login role of tenure_worker,
    unless it exists: roles belong to the cluster, and a database made earlier, or beside
    this one, may have made it already."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", role):
        raise InvalidArgument(f"not a plain lower-case role name: {role!r}")
    return f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
        CREATE ROLE {role} LOGIN IN ROLE tenure_worker;
    END IF;
END
$$;
"""


# One table per area for the writes the demo services fence: each row carries the
# grant (term, epoch) under which it was written, to be checked against the history.
SETUP_SQL = f"""{worker_login_role_sql(APP_ROLE)}
CREATE SCHEMA IF NOT EXISTS tenure_demo;
GRANT USAGE ON SCHEMA tenure_demo TO {APP_ROLE};

CREATE TABLE IF NOT EXISTS tenure_demo.work (
    id          bigserial   PRIMARY KEY,
    utype       text        NOT NULL,
    instance_id uuid        NOT NULL,
    term        bigint      NOT NULL,
    done_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT INSERT ON tenure_demo.work TO {APP_ROLE};
GRANT USAGE ON SEQUENCE tenure_demo.work_id_seq TO {APP_ROLE};

CREATE TABLE IF NOT EXISTS tenure_demo.ledger (
    order_no integer     NOT NULL,
    entry    text        NOT NULL,
    task_id  uuid        NOT NULL,
    epoch    bigint      NOT NULL,
    owner    uuid        NOT NULL,
    done_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT INSERT ON tenure_demo.ledger TO {APP_ROLE};

CREATE TABLE IF NOT EXISTS tenure_demo.claim_work (
    keyspace    text        NOT NULL,
    key         text        NOT NULL,
    epoch       bigint      NOT NULL,
    instance_id uuid        NOT NULL,
    done_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT INSERT ON tenure_demo.claim_work TO {APP_ROLE};

CREATE TABLE IF NOT EXISTS tenure_demo.replica_writes (
    id         bigserial   PRIMARY KEY,
    request_id text        NOT NULL UNIQUE,
    replica    text        NOT NULL,
    epoch      bigint      NOT NULL,
    pid        integer     NOT NULL,
    done_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
GRANT INSERT, SELECT ON tenure_demo.replica_writes TO {APP_ROLE};  -- SELECT for RETURNING
GRANT USAGE ON SEQUENCE tenure_demo.replica_writes_id_seq TO {APP_ROLE};
"""


def setup(admin_conninfo: str) -> str:
    """Create the application's login role and tables; returns its conninfo."""
    with psycopg.connect(admin_conninfo, autocommit=True) as connection:
        connection.execute(SETUP_SQL)
    return make_conninfo(admin_conninfo, user=APP_ROLE)


def server_now(connection: psycopg.Connection[Any]) -> datetime:
    row = connection.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def retire_keyspace(admin: psycopg.Connection[Any], keyspace: str) -> int:
    """Retire every key of ``keyspace`` (an earlier run's): their claims, claim log and
    batches go with them. Returns how many keys were retired."""
    driver = Driver(admin)
    keys = [claim.key for claim in driver.claims(keyspace)]
    # claim_retire takes at most 10,000 keys per call
    chunks = [keys[start : start + 10_000] for start in range(0, len(keys), 10_000)]
    return sum(driver.claim_retire(keyspace, chunk) for chunk in chunks)
