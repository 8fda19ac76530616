#!/usr/bin/env bash
# Installs the peers that `tenure bench --sections peers` runs beside tenure, pgqueuer and
# procrastinate with the drivers they need, into their own virtual environment .venv-peers:
# never into tenure's .venv, so tenure can neither import them nor depend on their versions.
# The pins are the latest releases on PyPI when they were last checked (`pip index versions
# pgqueuer`); raise them here. A second run with the same pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

peers=(
    "pgqueuer==1.6.0"
    "procrastinate==3.10.0"
    "asyncpg==0.32.0"
    "psycopg[binary,pool]==3.3.9"
)

stamp=.venv-peers/.installed
want=$(printf '%s\n' "${peers[@]}" | sha256sum | cut -d' ' -f1)
if [ ! -x .venv-peers/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "preparing .venv-peers (${peers[*]})"
    python3 -m venv .venv-peers
    .venv-peers/bin/pip install -q --disable-pip-version-check "${peers[@]}"
    .venv-peers/bin/python -c 'import asyncpg, pgqueuer, procrastinate, psycopg'
    echo "$want" >"$stamp"
fi
