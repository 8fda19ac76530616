#!/usr/bin/env bash
# Every check, against the throwaway cluster that scripts/with-cluster.sh started.
set -euo pipefail
cd "$(dirname "$0")/.."
export SQITCH_FULLNAME="tenure make" SQITCH_EMAIL=make@localhost
target="db:pg://${PGUSER}@${PGHOST}:${PGPORT}/tenure_ci"
step() { printf '\n== %s\n' "$*"; }

step "sqitch deploy --verify, revert, deploy again"
scripts/deploy.sh tenure_ci
sqitch --quiet revert -y "$target"
remaining=$(psql -X -At -d tenure_ci -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'tenure'")
[ "$remaining" = 0 ] || { echo "revert left schema tenure behind"; exit 1; }
sqitch --quiet deploy --verify "$target"
sqitch status "$target" | tail -1

step "plpgsql_check (any finding fails)"
psql -X -q -v ON_ERROR_STOP=1 -d tenure_ci -f scripts/lint-sql.sql

step "pgTAP"
psql -X -q -d tenure_ci -c 'CREATE EXTENSION IF NOT EXISTS pgtap'
pg_prove --failures -d tenure_ci db/tests/*.sql

step "isolation specs (pg_isolation_regress): exact interleavings of the races that matter"
db/tests/isolation/run.sh

step "docs/sql-reference.md, and the texts docs/sql.md quotes, match the COMMENT ON texts"
.venv/bin/python -m tenure.testing.sqldocs --db "dbname=tenure_ci" --check docs/sql-reference.md
.venv/bin/python -m tenure.testing.sqldocs --db "dbname=tenure_ci" --check-quotes docs/sql.md

step "the life cycle without Python: psql and Node.js, as a tenure_worker login role"
psql -X -q -d tenure_ci -c "DO \$\$ BEGIN CREATE ROLE tenure_example LOGIN IN ROLE tenure_worker;
    EXCEPTION WHEN duplicate_object THEN NULL; END \$\$"
psql -X -v ON_ERROR_STOP=1 -U tenure_example -d tenure_ci -f examples/psql/lifecycle.sql
(cd examples/node && PGUSER=tenure_example PGDATABASE=tenure_ci node lifecycle.js)

step "the Python examples (examples/python), as the same tenure_worker login role"
# The examples create their own small tables, as an application does with its own role:
# here in the role's own schema (first on the default search_path "$user", public).
# tenure_worker itself grants only tenure's functions and views.
psql -X -q -v ON_ERROR_STOP=1 -d tenure_ci -c "CREATE SCHEMA IF NOT EXISTS AUTHORIZATION tenure_example"
for f in examples/python/*.py; do
    echo "-- $f"
    PGUSER=tenure_example PGDATABASE=tenure_ci timeout 60 .venv/bin/python "$f"
done

step "upgrade from every release tag, and revert to it"
scripts/upgrade-check.sh

step "ruff"
.venv/bin/ruff check python examples/python
.venv/bin/ruff format --check python examples/python

step "mypy"
(cd python && ../.venv/bin/mypy tenure tests ../examples/python)

step "pytest"
(cd python && ../.venv/bin/pytest ${PYTEST_ARGS:-})
