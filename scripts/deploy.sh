#!/usr/bin/env bash
# Create database $1 on the cluster of the libpq environment and deploy tenure into it.
set -euo pipefail
cd "$(dirname "$0")/.."
db=${1:?usage: deploy.sh DBNAME}
export SQITCH_FULLNAME=${SQITCH_FULLNAME:-tenure make} SQITCH_EMAIL=${SQITCH_EMAIL:-make@localhost}
createdb "$db"
sqitch --quiet deploy --verify "db:pg://${PGUSER}@${PGHOST}:${PGPORT}/$db"
