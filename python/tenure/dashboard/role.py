"""The dashboard's database role: it should read views and call public functions, nothing
more. :func:`check_role` refuses a superuser and a role that may write tenure's tables
directly (itself or through a role it is a member of), so that a bug in the dashboard or
a stolen token can do no more than the public functions allow."""

from __future__ import annotations

from typing import Any

import psycopg

from tenure.connect import connection_options
from tenure.errors import InvalidConfiguration

WRITES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE")

# Every role the current user is a member of (itself included, with or without INHERIT:
# a member may SET ROLE to it), whether it is a superuser, and what it may write in schema
# tenure. has_table_privilege is true for a table's owner as well.
ROLE_SQL = """
SELECT r.rolname,
       r.rolsuper,
       coalesce(array_agg(format('%%s on %%I.%%I', p.privilege, n.nspname, c.relname)
                          ORDER BY c.relname, p.ord)
                FILTER (WHERE c.oid IS NOT NULL), '{}')
  FROM pg_roles r
  LEFT JOIN pg_namespace n ON n.nspname = 'tenure'
  LEFT JOIN unnest(%(writes)s::text[]) WITH ORDINALITY AS p (privilege, ord) ON true
  LEFT JOIN pg_class c
         ON c.relnamespace = n.oid AND c.relkind IN ('r', 'p')
        AND has_table_privilege(r.oid, c.oid, p.privilege)
 WHERE pg_has_role(current_user, r.oid, 'MEMBER')
 GROUP BY r.rolname, r.rolsuper
 ORDER BY r.rolname = current_user DESC, r.rolname
"""


def role_problems(connection: psycopg.Connection[Any]) -> tuple[str, list[str]]:
    """The current user's name and what it may do beyond reading views and calling functions."""
    user_row = connection.execute("SELECT current_user").fetchone()
    assert user_row is not None
    user = str(user_row[0])
    problems: list[str] = []
    for name, superuser, writes in connection.execute(ROLE_SQL, {"writes": list(WRITES)}).fetchall():
        if superuser and name == user:
            return user, ["is a superuser"]  # a member of every role: the rest says nothing more
        via = "" if name == user else f" (through its membership in {name})"
        if superuser:
            problems.append(f"is a superuser{via}")
        elif writes:
            shown = ", ".join(writes[:4]) + (f" and {len(writes) - 4} more" if len(writes) > 4 else "")
            problems.append(f"may write tenure's tables directly{via}: {shown}")
    return user, problems


def check_role(conninfo: str) -> None:
    """Raise :class:`InvalidConfiguration` when the role of ``conninfo`` is a superuser or may
    INSERT, UPDATE, DELETE or TRUNCATE a table of schema tenure."""
    options = connection_options(application_name="tenure dashboard (role check)", deadline=10.0)
    with psycopg.connect(conninfo, **options) as connection:
        user, problems = role_problems(connection)
    if problems:
        raise InvalidConfiguration(
            f"the dashboard refuses to run as role {user!r}: it {'; it '.join(problems)}",
            detail="the dashboard needs only to read tenure's views and execute its public functions",
            hint="connect as a login role that is a member of tenure_worker and nothing more "
            "(CREATE ROLE dashboard LOGIN IN ROLE tenure_worker), or start it with "
            "--allow-privileged-role if you accept that risk",
        )
