#!/usr/bin/env bash
# The concurrency specs of db/tests/isolation/specs, run by PostgreSQL's isolation
# tester against the cluster of the libpq environment (PGHOST, PGPORT, PGUSER), in a
# database of their own with tenure deployed. Each spec's output must equal its
# expected/ file. The specs call the internal time-travel functions, so the
# interleaving alone decides, and they run as the cluster's superuser.
#   db/tests/isolation/run.sh [SPEC...]   default: every spec
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
pgxs_isolation=${PG_ISOLATION_DIR:-/usr/lib/postgresql/15/lib/pgxs/src/test/isolation}
db=tenure_isolation
# ISOLATION_RESULTS=DIR keeps the results (DIR/results/*.out), to review a new spec's output.
if [ -n "${ISOLATION_RESULTS:-}" ]; then
    out=$ISOLATION_RESULTS
    mkdir -p "$out"
else
    out=$(mktemp -d /tmp/tenure-isolation.XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi

dropdb --if-exists "$db"
../../../scripts/deploy.sh "$db"

if [ "$#" -eq 0 ]; then
    set -- $(cd specs && ls *.spec | sed 's/\.spec$//')
fi
# A step that waits is reported once it has waited this long; a hang fails the spec.
export PGISOLATIONTIMEOUT=${PGISOLATIONTIMEOUT:-60}
status=0
"$pgxs_isolation/pg_isolation_regress" --use-existing --dbname="$db" --bindir= \
    --inputdir="$here" --outputdir="$out" "$@" || status=$?
if [ "$status" != 0 ] && [ -f "$out/regression.diffs" ]; then
    cat "$out/regression.diffs"
fi
dropdb --if-exists "$db"
exit "$status"
