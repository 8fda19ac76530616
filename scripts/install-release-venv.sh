#!/usr/bin/env bash
# Installs a released tenure package into its own virtual environment, for the rolling
# upgrade test (python/tests/test_rolling_upgrade.py): scripts/install-release-venv.sh v0.1.0
# makes .venv-v0.1.0 with the package of the commit that cut @v0.1.0 in sqitch.plan (the
# last commit that added or changed the tag's line, as scripts/upgrade-check.sh finds it),
# and keeps that commit's tree (python/, sqitch.conf, sqitch.plan, db/) in .venv-v0.1.0/src,
# where the test deploys the release's schema from. A second run for the same commit does
# nothing. Needs the git history (not a shallow clone).
set -euo pipefail
cd "$(dirname "$0")/.."
release=${1:?usage: scripts/install-release-venv.sh RELEASE (a tag of sqitch.plan without @, e.g. v0.1.0)}

grep -q "^@$release " sqitch.plan || { echo "install-release-venv: sqitch.plan has no tag @$release" >&2; exit 1; }
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" != false ]; then
    echo "install-release-venv: needs the full git history to find the commit that cut @$release," \
         "but this is a shallow clone or no git repository: run git fetch --unshallow" >&2
    exit 1
fi
commit=$(git log -1 --format=%H -G "^@$release " -- sqitch.plan)
venv=.venv-$release
stamp=$venv/.installed
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$commit" ]; then
    exit 0
fi
echo "preparing $venv (the tenure package of @$release, commit ${commit:0:12})"
rm -rf "$venv"
python3 -m venv "$venv"
mkdir "$venv/src"
git archive "$commit" python sqitch.conf sqitch.plan db | tar -x -C "$venv/src"
# Its own dependencies, as it declared them, then the package itself (a wheel built from the tree).
"$venv/bin/pip" install -q --disable-pip-version-check "$venv/src/python"
"$venv/bin/python" -c "import importlib.metadata as m, tenure; print('  tenure', m.version('tenure'), 'from', tenure.__file__)"
rm -rf "$venv/src/python/build"
echo "$commit" >"$stamp"
