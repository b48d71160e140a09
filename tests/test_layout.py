"""The import rules the layout promises (docs/contributing/layout.md): `teamctl.shared` imports
neither the coordinator nor the worker, the coordinator never imports the worker, the CLI is a
leaf, a planned run's code (`runs`) and a persistent team's (`teams`) never import each other, and
there are no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"teamctl.coordinator": "coordinator", "teamctl.worker": "worker",
            "teamctl.shared": "shared", "teamctl": "teamctl"}


def module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    package = next(name for name, top in PACKAGES.items() if top == folder)
    rest = path.relative_to(ROOT / folder).with_suffix("").parts
    return ".".join((package, *rest)).removesuffix(".__init__")


def imports_of(path: Path) -> set[str]:
    """Every teamctl module named in an import statement of `path` (any nesting level)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name for name in names if name.startswith("teamctl.")}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = [p for top in PACKAGES.values() for p in (ROOT / top).rglob("*.py")]
    return {module_name(p): imports_of(p) for p in files}


@pytest.mark.parametrize(("importer", "forbidden"), [
    ("teamctl.shared", "teamctl.coordinator"),
    ("teamctl.shared", "teamctl.worker"),
    ("teamctl.coordinator", "teamctl.worker"),
])
def test_layer_does_not_import(graph: dict[str, set[str]], importer: str, forbidden: str) -> None:
    offenders = sorted(f"{module} -> {target}" for module, targets in graph.items()
                       if module.startswith(importer + ".") or module == importer
                       for target in targets if target.startswith(forbidden))
    assert offenders == []


CLI = "teamctl.coordinator.cli"
CLI_IMPORTERS_ALLOWED = {"teamctl.__main__"}
"""`python -m teamctl` is the CLI's other door."""


def test_nothing_outside_the_cli_imports_it(graph: dict[str, set[str]]) -> None:
    offenders = sorted(f"{module} -> {target}" for module, targets in graph.items()
                       if not module.startswith(CLI + ".") and module != CLI
                       and module not in CLI_IMPORTERS_ALLOWED
                       for target in targets if target == CLI or target.startswith(CLI + "."))
    assert offenders == []


KINDS = ("runs", "teams")
"""The two kinds of team: a module under a `runs` package serves planned runs, one under `teams`
persistent teams; what both use lives outside either (`shared/agent`, the common modules)."""


def kind_of(module: str) -> str | None:
    return next((kind for kind in KINDS if kind in module.split(".")), None)


def test_runs_and_teams_do_not_import_each_other(graph: dict[str, set[str]]) -> None:
    offenders = sorted(f"{module} -> {target}" for module, targets in graph.items()
                       for target in targets
                       if kind_of(module) and kind_of(target)
                       and kind_of(module) != kind_of(target))
    assert offenders == []
    assert {kind_of(module) for module in graph} >= set(KINDS)  # the rule still sees both


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    def deps(module: str) -> set[str]:
        # `from teamctl.x import y` may name a module or a name in a module: keep known modules.
        return {t for t in graph.get(module, set()) if t in graph and t != module}

    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path, module]))
        if module in done:
            return
        for dep in sorted(deps(module)):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
