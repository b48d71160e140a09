"""The suite's own layout: test modules sit in one folder per concern, shared helpers live in
tests/support, so no test module (nor the benchmarks) imports a test module or conftest, and the
teamctl command is defined once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "support"


def test_module(name: str) -> bool:
    """`name` (dotted, from the repository root) is a test module or conftest."""
    parts = name.split(".")
    return (
        len(parts) >= 2
        and parts[0] == "tests"
        and (parts[-1] == "conftest" or parts[-1].startswith("test_"))
    )


test_module.__test__ = False  # a predicate that pytest would otherwise collect by its name


def imported_test_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) for each import in `source` of a test module or conftest; `package` is
    the dotted package of the file, which a relative import starts from."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = (
                [module]
                if test_module(module)
                else [f"{module}.{alias.name}" for alias in node.names]
            )
        else:
            continue
        found += [(node.lineno, name) for name in names if test_module(name)]
    return found


def teamctl_definitions(source: str) -> list[int]:
    """Lines of module-level assignments to TEAMCTL in `source`."""
    lines = []
    for node in ast.parse(source).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, ast.AnnAssign) else [])
        )
        if any(isinstance(t, ast.Name) and t.id == "TEAMCTL" for t in targets):
            lines.append(node.lineno)
    return lines


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parent.parts)


def sources() -> list[Path]:
    return sorted([*TESTS.rglob("*.py"), *(ROOT / "bench").rglob("*.py")])


CONCERNS = {
    "cli",
    "faults",
    "injection",
    "models",
    "project",
    "runs",
    "teams",
    "tools",
    "web",
    "workers",
}
"""The folders test modules sit in, one per concern (docs/contributing/testing.md says which)."""


def test_every_test_module_sits_in_a_concern_folder() -> None:
    misplaced = sorted(
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if len(path.relative_to(TESTS).parts) != 2
        or path.relative_to(TESTS).parts[0] not in CONCERNS
    )
    assert misplaced == [], "move each into the folder of its concern: " + ", ".join(misplaced)
    assert {path.parent.name for path in TESTS.glob("*/test_*.py")} == CONCERNS


def test_no_module_imports_a_test_module_or_conftest() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources()
        for line, name in imported_test_modules(path.read_text(encoding="utf-8"), package_of(path))
    ]
    assert offenders == [], "move the helper to tests/support instead:\n" + "\n".join(offenders)


def test_the_teamctl_command_is_defined_once_in_support() -> None:
    definitions = [
        (path, line)
        for path in sources()
        for line in teamctl_definitions(path.read_text(encoding="utf-8"))
    ]
    assert [path for path, _ in definitions] == [SUPPORT / "cli.py"], (
        "import TEAMCTL from tests.support.cli instead:\n"
        + "\n".join(f"{path.relative_to(ROOT)}:{line}" for path, line in definitions)
    )


@pytest.mark.parametrize(
    ("source", "package", "expected"),
    [
        ("from tests.cli.test_cli import x\n", "tests", [(1, "tests.cli.test_cli")]),
        ("import tests.conftest\n", "bench", [(1, "tests.conftest")]),
        ("\nfrom tests import conftest, support\n", "tests", [(2, "tests.conftest")]),
        ("from .test_lead import typed\n", "tests.teams", [(1, "tests.teams.test_lead")]),
        ("from .. import test_lead\n", "tests.support", [(1, "tests.test_lead")]),
        ("def f():\n    from tests.cli.test_api import g\n", "tests", [(2, "tests.cli.test_api")]),
        (
            "from tests.support.cli import TEAMCTL\nimport tests.pytools_fixture.tools\n",
            "tests",
            [],
        ),
        ("from tests.runs.test_board import x\n", "tests.teams", [(1, "tests.runs.test_board")]),
    ],
    ids=[
        "from-test-module",
        "import-conftest",
        "conftest-from-package",
        "relative",
        "relative-from-support",
        "inside-a-function",
        "support-and-data-packages",
        "from-a-concern-folder",
    ],
)
def test_the_import_check_finds_what_it_should(
    source: str, package: str, expected: list[tuple[int, str]]
) -> None:
    assert imported_test_modules(source, package) == expected


def test_the_definition_check_sees_only_the_module_level() -> None:
    source = "TEAMCTL = ['x']\nTEAMCTL: list[str] = []\ndef f():\n    TEAMCTL = 1\n"
    assert teamctl_definitions(source) == [1, 2]
