"""Build hook: bundle the sqitch project into the wheel as tenure/sqitch.

The repository's sqitch.conf, sqitch.plan and db/{deploy,revert,verify,procedures} stay the single source of
truth; they are copied into the build tree only, so `tenure deploy` of an installed wheel can deploy them.
An editable install finds them at the repository root instead (tenure.deploy.project_dir).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent
PARTS = ["sqitch.conf", "sqitch.plan", "db/deploy", "db/revert", "db/verify", "db/procedures"]


class BuildWithSqitchProject(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install deploys the repository's own project
        missing = [part for part in PARTS if not (ROOT / part).exists()]
        if missing:
            raise SystemExit(
                f"cannot bundle the sqitch project: {', '.join(missing)} not found under {ROOT}. "
                "Build the wheel from the repository (pip wheel ./python), not from an sdist."
            )
        target = Path(self.build_lib) / "tenure" / "sqitch"
        shutil.rmtree(target, ignore_errors=True)
        for part in PARTS:
            source, dest = ROOT / part, target / part
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest)
            else:
                shutil.copy2(source, dest)


setup(cmdclass={"build_py": BuildWithSqitchProject})
