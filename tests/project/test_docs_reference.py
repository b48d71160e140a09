"""The docs site: it builds strictly (a broken link or page fails), and its generated reference
names every command, option, setting, result field and Redis key the code has."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest
from teamctl.coordinator.cli.app import main
from teamctl.shared.keys import KeySpace, LimitKeys, RunKeys, TeamKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.output import RunResult
from teamctl.shared.teams.options import TeamOptions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_reference", ROOT / "docs" / "hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def click_tree(
    command: click.Command, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"teamctl {' '.join((*path, name))} does not load"
            found += click_tree(sub, (*path, name))
    return found


def test_every_command_and_option_is_in_the_cli_reference(reference: ModuleType) -> None:
    page = reference.cli_page()
    tree = click_tree(main)
    assert len(tree) > 30  # the walk reached the lazy verbs and the groups' subcommands
    for path, command in tree[1:]:
        heading = f"## teamctl {' '.join(path)}\n"
        assert heading in page, f"teamctl {' '.join(path)} is not in the CLI reference"
        section = page.split(heading, 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for flag in param.opts:
                    assert f"`{flag}`" in section, f"{flag} of {' '.join(path)} is missing"


@pytest.mark.parametrize(
    ("page", "model"),
    [
        ("run_options_page", RunOptions),
        ("team_options_page", TeamOptions),
        ("result_page", RunResult),
    ],
)
def test_every_setting_and_result_field_is_in_its_reference(
    reference: ModuleType, page: str, model: type
) -> None:
    text = getattr(reference, page)()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    documented = {row.split("`")[1] for row in rows}
    assert documented == set(model.model_fields)


def test_run_options_show_their_default_and_range(reference: ModuleType) -> None:
    row = next(
        line
        for line in reference.run_options_page().splitlines()
        if line.startswith("| `heartbeat_ttl_s` |")
    )
    assert "`30.0`" in row and "> 0" in row and "<= 604,800" in row


def test_every_redis_key_is_in_the_keys_reference(reference: ModuleType) -> None:
    page = reference.redis_keys_page()
    run, team = RunKeys("runid0"), TeamKeys("teamname")
    expected = 0
    limits = LimitKeys("a" * 32)
    for space, owner in ((run, KeySpace), (run, RunKeys), (team, TeamKeys), (limits, LimitKeys)):
        for name, member in vars(owner).items():
            target = member.fget if isinstance(member, property) else member
            if name.startswith("_") or name in reference.NOT_KEYS or not callable(target):
                continue
            if (
                isinstance(member, property)
                and isinstance(getattr(space, name), str)
                and getattr(space, name).startswith("teamctl")
            ):
                expected += 1
                shown = (
                    getattr(space, name)
                    .replace("runid0", "<run>")
                    .replace("teamname", "<team>")
                    .replace("a" * 32, "<account>")
                )
                assert f"`{shown}`" in page, f"{owner.__name__}.{name} is not in the reference"
            elif not isinstance(member, property):
                expected += 1
    import teamctl.shared.keys as keys_module

    indexes = [
        key
        for key in vars(keys_module).values()
        if isinstance(key, str) and key.startswith("teamctl:")
    ]
    assert {"teamctl:runs", "teamctl:runs:started", "teamctl:teams"} <= set(indexes)
    for key in indexes:
        assert f"| `{key}` |" in page, f"{key} is not in the reference"
    assert "| `teamctl:fallback:cooldown:<digest>` |" in page
    shared = len(list(reference.shared_key_rows(keys_module)))
    assert page.count("| `teamctl:") == expected + len(indexes) + shared


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """`scripts/docs`: MkDocs in strict mode, so a broken link, a page missing from the nav or
    a warning fails."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.fail("mkdocs is not installed: run scripts/setup (it installs the docs extra)")
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reference" / "cli" / "index.html").exists()
    assert "teamctl team spawn" in (tmp_path / "reference" / "cli" / "index.html").read_text()
