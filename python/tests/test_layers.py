"""Imports run in one direction: core <- runtime <- http <- cli, and core, runtime, http
<- testing <- demo, bench; core <- dashboard <- demo (the demo ends with the dashboard).
The CLI imports demo, bench and dashboard only inside their commands, so that no other
command loads them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tenure"
CORE = {"tenure.errors", "tenure.driver", "tenure.connect", "tenure.metrics", "tenure.deploy"}
MAY_IMPORT = {
    "core": {"core"},
    "runtime": {"core", "runtime"},
    "http": {"core", "runtime", "http"},
    "api": {"core", "runtime", "http"},  # tenure/__init__.py: the public API
    "cli": {"core", "runtime", "http", "api", "cli"},
    "testing": {"core", "runtime", "http", "api", "testing"},
    "demo": {"core", "runtime", "http", "api", "testing", "dashboard", "demo"},
    "bench": {"core", "runtime", "http", "api", "testing", "bench"},
    "dashboard": {"core", "dashboard"},  # tenure dashboard's web pages: the core's views and functions only
}
LATE_ONLY = {"cli": {"demo", "bench", "dashboard"}}  # allowed inside a function, never at module level


def layer(module: str) -> str:
    if module in ("tenure", "tenure.aio"):
        return "api"
    if module in CORE:
        return "core"
    if module == "tenure.__main__":
        return "cli"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in MAY_IMPORT:
        return parts[1]
    raise AssertionError(f"{module} belongs to no layer: put it in one of {sorted(MAY_IMPORT)}")


def module_name(path: Path) -> str:
    parts = ("tenure", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(imported tenure module, at module level?) for every import in a module."""
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "tenure":  # from tenure import driver: a submodule, else the API
                names = [
                    f"tenure.{a.name}"
                    if (PACKAGE / f"{a.name}.py").exists() or (PACKAGE / a.name).is_dir()
                    else "tenure"
                    for a in node.names
                ]
        found += [(name, id(node) in top) for name in names if name.split(".")[0] == "tenure"]
    return found


def test_every_import_runs_with_the_layers() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        own = layer(importer)
        for imported, at_top in imports(ast.parse(path.read_text())):
            theirs = layer(imported)
            late = theirs in LATE_ONLY.get(own, set())
            if (late and at_top) or (not late and theirs not in MAY_IMPORT[own]):
                where = "at module level" if at_top else "in a function"
                wrong.append(f"{importer} ({own}) imports {imported} ({theirs}) {where}")
    assert wrong == []


def test_the_checker_sees_a_wrong_import() -> None:
    tree = ast.parse("from tenure.demo.heartbeat import run_demo\ndef f():\n    import tenure.bench\n")
    found = imports(tree)
    assert found == [("tenure.demo.heartbeat", True), ("tenure.bench", False)]
    assert layer("tenure.demo.heartbeat") not in MAY_IMPORT["runtime"]
    assert layer("tenure.bench") in LATE_ONLY["cli"]
