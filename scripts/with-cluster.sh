#!/usr/bin/env bash
# Run a command against a throwaway cluster that is stopped and removed afterwards,
# whether the command succeeds, fails or is interrupted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/tenure-pg.XXXXXX)
chmod 755 "$dir"
trap '"$here/pgcluster.sh" stop "$dir"' EXIT
trap 'exit 130' INT TERM
"$here/pgcluster.sh" start "$dir"
# shellcheck disable=SC1091
source "$dir/env"
"$@"
