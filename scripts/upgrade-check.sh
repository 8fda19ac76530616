#!/usr/bin/env bash
# Upgrade check, against the throwaway cluster of scripts/with-cluster.sh, for every release tag of sqitch.plan:
#   A: the tag, deployed from the commit that tagged it, then upgraded to the current plan from this tree;
#   B: the current plan deployed fresh.  pg_dump --schema-only of A and B must be equal.
#   A reverted to the tag must equal C: the tag deployed fresh from its own commit.
# Deploying the tag from its own commit matters: deploy scripts include db/procedures/*.sql, so deploying
# the tag from today's tree would install today's function text and hide a function changed without a
# sqitch rework (see docs/upgrades.md). That needs git history: a shallow clone fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
export SQITCH_FULLNAME=${SQITCH_FULLNAME:-tenure make} SQITCH_EMAIL=${SQITCH_EMAIL:-make@localhost}

tags=$(sed -n 's/^@\([^ ]*\) .*/\1/p' sqitch.plan)
[ -n "$tags" ] || { echo "upgrade-check: sqitch.plan has no release tag (@name) to upgrade from" >&2; exit 1; }
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" != false ]; then
    echo "upgrade-check: needs the full git history to deploy each release from the commit that tagged it," \
         "but this is a shallow clone or no git repository: run git fetch --unshallow" >&2
    exit 1
fi

work=$(mktemp -d /tmp/tenure-upgrade.XXXXXX)
trap 'rm -rf "$work"' EXIT

target() { echo "db:pg://${PGUSER}@${PGHOST}:${PGPORT}/$1"; }
# The schema as pg_dump sees it, without sqitch's registry and without lines that differ between dumps.
schema() {
    pg_dump --schema-only --exclude-schema=sqitch "$1" | grep -v -e '^--' -e '^\\restrict' -e '^\\unrestrict' \
        | grep -v '^$'
}
same() {  # same NAME_A NAME_B WHAT
    schema "$1" >"$work/$1.sql"
    schema "$2" >"$work/$2.sql"
    if ! diff -u "$work/$2.sql" "$work/$1.sql" >"$work/diff"; then
        cat "$work/diff"
        echo "upgrade-check: $3 (diff above: - $2, + $1)" >&2
        echo "A function changed in an already released change needs a sqitch rework: see docs/upgrades.md" >&2
        exit 1
    fi
}

for db in tenure_up_a tenure_up_b tenure_up_c; do
    PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists "$db"
done
createdb tenure_up_b
sqitch --quiet deploy --verify "$(target tenure_up_b)"
for tag in $tags; do
    # The last commit that added (or changed) the tag's line: the release as it was cut.
    commit=$(git log -1 --format=%H -G "^@$tag " -- sqitch.plan)
    [ -n "$commit" ] || { echo "upgrade-check: no commit adds @$tag to sqitch.plan (commit it first)" >&2; exit 1; }
    rm -rf "$work/old" && mkdir "$work/old"
    git archive "$commit" sqitch.conf sqitch.plan db | tar -x -C "$work/old"
    createdb tenure_up_a
    createdb tenure_up_c
    echo "@$tag from commit ${commit:0:12}, upgraded to the current plan, against a fresh deploy"
    (cd "$work/old" && sqitch --quiet deploy --verify --to "@$tag" "$(target tenure_up_a)")
    sqitch --quiet deploy --verify "$(target tenure_up_a)"
    same tenure_up_a tenure_up_b "the schema upgraded from @$tag differs from a fresh deploy of the current plan"

    echo "revert to @$tag, against a fresh deploy of @$tag from its commit"
    sqitch --quiet revert -y --to "@$tag" "$(target tenure_up_a)"
    (cd "$work/old" && sqitch --quiet deploy --verify --to "@$tag" "$(target tenure_up_c)")
    same tenure_up_a tenure_up_c "the schema reverted to @$tag differs from a fresh deploy of @$tag"
    dropdb tenure_up_a
    dropdb tenure_up_c
done
dropdb tenure_up_b
echo "upgrade from each release ($(echo $tags)) and revert to it: schemas equal"
