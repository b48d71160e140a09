"""The import rules the layout promises (docs/contributing/layout.md): `teamctl.shared` imports
neither the coordinator nor the worker, the coordinator never imports the worker, the CLI is a
leaf, the web view is imported only by the CLI and is the one place outside it (and the team file)
that reads both kinds of team, its server (Starlette, uvicorn) is imported by the dashboard's
modules alone, a planned run's code (`runs`) and a persistent team's (`teams`) never import each
other, and there are no cycles."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "teamctl.coordinator": "coordinator",
    "teamctl.worker": "worker",
    "teamctl.shared": "shared",
    "teamctl": "teamctl",
}


def module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    package = next(name for name, top in PACKAGES.items() if top == folder)
    rest = path.relative_to(ROOT / folder).with_suffix("").parts
    return ".".join((package, *rest)).removesuffix(".__init__")


def imports_of(path: Path, prefix: str = "teamctl.") -> set[str]:
    """Every module under `prefix` named in an import statement of `path` (any nesting level)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name for name in names if name.startswith(prefix)}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = [p for top in PACKAGES.values() for p in (ROOT / top).rglob("*.py")]
    return {module_name(p): imports_of(p) for p in files}


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("teamctl.shared", "teamctl.coordinator"),
        ("teamctl.shared", "teamctl.worker"),
        ("teamctl.coordinator", "teamctl.worker"),
    ],
)
def test_layer_does_not_import(graph: dict[str, set[str]], importer: str, forbidden: str) -> None:
    offenders = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith(importer + ".") or module == importer
        for target in targets
        if target.startswith(forbidden)
    )
    assert offenders == []


CLI = "teamctl.coordinator.cli"
CLI_IMPORTERS_ALLOWED = {"teamctl.__main__"}
"""`python -m teamctl` is the CLI's other door."""


def test_nothing_outside_the_cli_imports_it(graph: dict[str, set[str]]) -> None:
    offenders = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not module.startswith(CLI + ".")
        and module != CLI
        and module not in CLI_IMPORTERS_ALLOWED
        for target in targets
        if target == CLI or target.startswith(CLI + ".")
    )
    assert offenders == []


KINDS = ("runs", "teams")
"""The two kinds of team: a module under a `runs` package serves planned runs, one under `teams`
persistent teams; what both use lives outside either (`shared/agent`, the common modules)."""


def kind_of(module: str) -> str | None:
    return next((kind for kind in KINDS if kind in module.split(".")), None)


def test_runs_and_teams_do_not_import_each_other(graph: dict[str, set[str]]) -> None:
    offenders = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if kind_of(module) and kind_of(target) and kind_of(module) != kind_of(target)
    )
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


WEB = "teamctl.coordinator.web"
BOTH_KINDS_ALLOWED = (CLI, WEB, "teamctl.shared.team_file")
"""The modules that may import both `runs` and `teams` modules: the CLI, the web view (its pages
show runs and teams side by side) and the team file (which holds both kinds of options). Any
other module that needs both is in the wrong place."""


def test_nothing_but_the_cli_imports_the_web_view(graph: dict[str, set[str]]) -> None:
    offenders = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not module.startswith((CLI + ".", WEB + ".")) and module != WEB
        for target in targets
        if target == WEB or target.startswith(WEB + ".")
    )
    assert offenders == []


def test_only_the_common_places_read_both_kinds(graph: dict[str, set[str]]) -> None:
    both = sorted(
        module for module, targets in graph.items() if {kind_of(t) for t in targets} >= set(KINDS)
    )
    assert [m for m in both if not m.startswith(BOTH_KINDS_ALLOWED)] == []
    assert any(m.startswith(WEB) for m in both)  # the rule still sees the web view


WEB_SERVER_MODULES = {
    "coordinator/web/app.py",
    "coordinator/web/access.py",
    "coordinator/web/serve.py",
}
"""The only files that import Starlette or uvicorn (the `teamctl[web]` extra): the dashboard
command imports them when it runs, so no other verb needs the extra or pays for importing it."""


def test_only_the_dashboard_imports_its_server() -> None:
    files = [p for top in PACKAGES.values() for p in (ROOT / top).rglob("*.py")]
    offenders = sorted(
        str(p.relative_to(ROOT))
        for p in files
        if imports_of(p, "starlette") | imports_of(p, "uvicorn")
        and str(p.relative_to(ROOT)) not in WEB_SERVER_MODULES
    )
    assert offenders == []


def test_every_package_folder_is_installed() -> None:
    """A folder added under the package must be listed in pyproject.toml, or a non-editable
    install (the image, `scripts/demo`) leaves it out."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
            "packages"
        ]
    )
    folders = {
        module_name(init) for top in PACKAGES.values() for init in (ROOT / top).rglob("__init__.py")
    }
    assert sorted(folders - listed) == []
