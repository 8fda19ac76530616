"""The README's "In your own database" steps, run as written on a fresh cluster: a user who
follows them gets a database, a deploy, an application role that can make its own tables,
and a first example that works.

The README marks its blocks ``<!-- first-run: environment -->``, ``<!-- first-run: steps -->``
and ``<!-- first-run: example -->``. The environment block names the user's server: the test
checks which variables it sets and gives them this cluster's values instead; the other two
blocks run verbatim, from the repository's root, in one ``bash -euo pipefail``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- first-run: (\S+) -->\n```sh\n(.*?)^```$", re.M | re.S)


def first_run_blocks() -> dict[str, str]:
    found = MARKER.findall((ROOT / "README.md").read_text())
    names = [name for name, _ in found]
    assert names == ["environment", "steps", "example"], f"README's first-run blocks: {names}"
    return dict(found)


@pytest.fixture
def fresh_cluster() -> Iterator[dict[str, str]]:
    """A throwaway cluster of its own (roles are global: no other test's roles in it); its
    libpq environment as a superuser."""
    directory = tempfile.mkdtemp(prefix="tenure-test-first-run.")
    os.chmod(directory, 0o755)
    script = str(ROOT / "scripts" / "pgcluster.sh")
    subprocess.run([script, "start", directory], check=True, stdout=subprocess.DEVNULL, timeout=120)
    try:
        lines = Path(directory, "env").read_text().splitlines()
        exported = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        yield {key: exported[key] for key in ("PGHOST", "PGPORT", "PGUSER")}
    finally:
        subprocess.run([script, "stop", directory], check=False, timeout=60)


def test_readme_first_run_blocks_are_marked_once() -> None:
    blocks = first_run_blocks()
    assignments = [word for word in shlex.split(blocks["environment"]) if word != "export"]
    names = sorted(word.split("=", 1)[0] for word in assignments)
    assert names == ["PGHOST", "PGPORT", "PGUSER"], assignments


@pytest.mark.timeout(180)
def test_readme_first_run_steps_work_on_a_fresh_cluster(fresh_cluster: dict[str, str]) -> None:
    blocks = first_run_blocks()
    # the user's shell: nothing of this test run's own database settings
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "TENURE_"))}
    env.update(fresh_cluster)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", blocks["steps"] + blocks["example"]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"^primary in term 1: fenced write committed$", result.stdout, re.M), output
    assert re.search(r"^after resigning: .*", result.stdout, re.M), output
    # tenure status, as my_app, shows the example's term
    assert re.search(r"^  scheduler +NONE \(expired\) +primary - +term 1 ", result.stdout, re.M), output
