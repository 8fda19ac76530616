#!/usr/bin/env bash
# docs/img/dashboard.png (or $2): the dashboard's heartbeat page (or $3), 1280x900, over the demo's
# fleet at work (tenure.demo.live), shot by Debian's chromium headless. Run inside a cluster:
#   scripts/with-cluster.sh bash -c 'scripts/deploy.sh tenure_shot && scripts/dashboard-screenshot.sh dbname=tenure_shot'
set -euo pipefail
cd "$(dirname "$0")/.."
db=${1:?usage: dashboard-screenshot.sh CONNINFO [OUTPUT.png] [PAGE]}
out=$(realpath -m "${2:-docs/img/dashboard.png}")
page=${3:-/heartbeat?window=60}
mkdir -p "$(dirname "$out")"
.venv/bin/python - "$db" "$out" "$page" <<'PY'
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tenure.demo.live import live

conninfo, out, page = sys.argv[1:4]
with tempfile.TemporaryDirectory() as workdir, live(conninfo, workdir=Path(workdir), rotate=5) as (server, _):
    time.sleep(25)  # a few handovers, claims settled, orders charged and shipped
    subprocess.run(
        ["/usr/bin/chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1280,900", f"--screenshot={out}", server.url + page],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, TMPDIR=workdir),  # chromium leaves a folder in its TMPDIR: gone with workdir
    )
print(out)
PY
