"""MkDocs hook: the pages generated at every build, so they cannot drift: the README as the landing
page, the reference from the code, and the benchmark results.

The CLI page walks the click tree, the options pages read the pydantic models (defaults, ranges,
and each field's docstring), the result page prints RunResult's JSON schema, and the Redis keys
page lists every key RunKeys and TeamKeys build. `tests/project/test_docs_reference.py` checks
that each command, option, field and key is there.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo

PAGES = {
    "index.md": "home_page",
    "reference/cli.md": "cli_page",
    "reference/run-options.md": "run_options_page",
    "reference/team-options.md": "team_options_page",
    "reference/result.md": "result_page",
    "reference/redis-keys.md": "redis_keys_page",
    "performance.md": "performance_page",
}
"""Each generated page and the function that writes it."""
ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site (none of them is a file in docs/)."""
    from mkdocs.structure.files import File

    for path, writer in PAGES.items():
        files.append(File.generated(config, path, content=globals()[writer]()))
    return files


def home_page() -> str:
    """The README, the site's landing page: its links into docs/ made relative to the site."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.replace("](docs/", "](")


# --- the CLI ---------------------------------------------------------------------------------


def commands(
    group: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command of the click tree under `group`, with its path of names, groups included."""
    yield path, group
    if isinstance(group, click.Group):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if command is not None and not command.hidden:
                yield from commands(command, (*path, name))


def cli_root() -> click.Command:
    from teamctl.coordinator.cli.app import main

    return main


def cli_page() -> str:
    lines = [
        "# CLI reference",
        "",
        "Every `teamctl` command and option, read from the CLI itself at each docs build.",
        "",
    ]
    for path, command in commands(cli_root()):
        if not path:
            continue
        lines += [f"## teamctl {' '.join(path)}", "", _usage(path, command), ""]
        if command.help:
            lines += [inspect.cleandoc(command.help), ""]
        lines += _params(command)
    return "\n".join(lines) + "\n"


def _usage(path: tuple[str, ...], command: click.Command) -> str:
    ctx = click.Context(command, info_name=" ".join(("teamctl", *path)))
    return f"```\n{command.get_usage(ctx)}\n```"


def _params(command: click.Command) -> list[str]:
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if not options:
        return []
    table = Table(["option", "default", "what"])
    for option in options:
        flags = ", ".join(f"`{flag}`" for flag in [*option.opts, *option.secondary_opts])
        default = option.default
        shown = (
            ""
            if default is None
            or type(default).__name__ == "Sentinel"
            or option.is_flag
            and not default
            else f"`{default}`"
        )
        table.add([flags, shown], flags, option.help or "")
    return [*table.lines(), ""]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


CELL_MAX_CHARS = 200
"""A longer description keeps its first sentence in the table; the whole of it follows the
table, so no row has to be read across several screens."""
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)\.\s")


class Table:
    """A reference table whose last column describes each row, kept short."""

    def __init__(self, header: list[str]) -> None:
        self.header = header
        self.rows: list[str] = []
        self.in_full: list[str] = []

    def add(self, cells: list[str], name: str, what: str) -> None:
        """A row of `cells` and `what`; a long `what` is listed in full, by `name`, below."""
        text = " ".join(what.split())
        if len(text) > CELL_MAX_CHARS:
            self.in_full.append(f"- {name}: {text}")
            text = _first_sentence(text) + " (in full below the table)"
        self.rows.append("| " + " | ".join([*cells, _cell(text)]) + " |")

    def lines(self) -> list[str]:
        head = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        notes = ["", "In full:", "", *self.in_full] if self.in_full else []
        return [*head, *self.rows, *notes]


def _first_sentence(text: str) -> str:
    """The first sentence of `text`, or its first words when that sentence is long too."""
    end = SENTENCE_END.search(text)
    first = text[: end.start() + 1] if end else text
    if len(first) <= CELL_MAX_CHARS - 45:
        return first
    return text[: text.rfind(" ", 0, CELL_MAX_CHARS - 45)] + " ..."


# --- run and team options ----------------------------------------------------------------------


def run_options_page() -> str:
    from teamctl.shared.runs.options import RunOptions

    return options_page(
        "Run options",
        RunOptions,
        "A planned run's options: the team file's `[options]` table, or "
        "`teamctl run --OPTION` flags.",
    )


def team_options_page() -> str:
    from teamctl.shared.teams.options import TeamOptions

    return options_page(
        "Team options",
        TeamOptions,
        "A persistent team's options: the team file's `[teammates]` table, "
        "given to `teamctl team create --file`.",
    )


def options_page(title: str, model: type[BaseModel], intro: str) -> str:
    docs = field_docs(model)
    lines = [
        f"# {title}",
        "",
        intro + " Read from the settings model at each docs build.",
        "",
    ]
    table = Table(["option", "type", "default", "range", "what"])
    for name, info in model.model_fields.items():
        cells = [f"`{name}`", _type(info), _default(info), _range(info)]
        table.add(cells, f"`{name}`", docs.get(name, info.description or ""))
    return "\n".join([*lines, *table.lines()]) + "\n"


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring (the string right after it in the class body)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for field, after in zip(body, body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _type(info: FieldInfo) -> str:
    annotation = info.annotation
    text = getattr(annotation, "__name__", None) or str(annotation)
    return f"`{text.replace('typing.', '')}`"


def _default(info: FieldInfo) -> str:
    default = info.get_default(call_default_factory=True)
    return f"`{json.dumps(default)}`"


def _range(info: FieldInfo) -> str:
    bounds = []
    for item in info.metadata:
        for attr, sign in (
            ("ge", ">="),
            ("gt", ">"),
            ("le", "<="),
            ("lt", "<"),
            ("max_length", "at most"),
        ):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
    return ", ".join(bounds)


# --- the result JSON -------------------------------------------------------------------------


def result_page() -> str:
    from teamctl.shared.runs.output import RunResult

    schema = json.dumps(RunResult.model_json_schema(), indent=2)
    docs = field_docs(RunResult)
    lines = [
        "# The result JSON",
        "",
        "What `teamctl run --json` and `teamctl status RUN --json` print, and what the "
        "Python API's `Run.result()` returns as a `RunResult`. Generated from the pydantic "
        "model at each docs build.",
        "",
    ]
    table = Table(["field", "type", "what"])
    for name, info in RunResult.model_fields.items():
        table.add([f"`{name}`", _type(info)], f"`{name}`", docs.get(name, ""))
    lines += [*table.lines(), "", "## JSON schema", "", "```json", schema, "```"]
    return "\n".join(lines) + "\n"


# --- Redis keys ------------------------------------------------------------------------------

PLACEHOLDERS = {
    "run_id": "runid0",
    "team": "teamname",
    "task_id": "taskid0",
    "member_id": "memberid0",
    "name": "mateid0",
    "request_id": "req_000000000000",
    "call": "planner",
    "role": "ROLE",
    "blob_id": "0" * 32,
    "model_digest": "1" * 24,
    "nonce": "2" * 12,
}
"""Valid sample arguments, shown as <placeholders> once the key is built."""
NOT_KEYS = frozenset({"base", "all_patterns"})
"""Members that build a prefix or a SCAN pattern, not a key."""
SHOWN = {
    "runid0": "<run>",
    "teamname": "<team>",
    "taskid0": "<task>",
    "memberid0": "<member>",
    "mateid0": "<teammate>",
    "req_000000000000": "<request>",
    "0" * 32: "<blob>",
    "a" * 32: "<account>",
    "1" * 24: "<model>",
    "2" * 12: "<nonce>",
}


def key_rows(space: Any, owner: type) -> Iterator[tuple[str, str]]:
    """(key pattern, docstring) for every key `owner` builds, in definition order."""
    for name, member in vars(owner).items():
        target = member.fget if isinstance(member, property) else member
        if name.startswith("_") or name in NOT_KEYS or not callable(target) or not target.__doc__:
            continue
        params = list(inspect.signature(target).parameters)[1:]
        value = getattr(space, name)
        if params:
            value = value(*(PLACEHOLDERS[p] for p in params))
        if not isinstance(value, str) or not value.startswith("teamctl"):
            continue
        for sample, shown in SHOWN.items():
            value = value.replace(sample, shown)
        yield value, inspect.cleandoc(target.__doc__)


def index_rows(module: Any) -> Iterator[tuple[str, str]]:
    """(key, docstring) for every module-level key of `module` (a constant with a docstring)."""
    body = ast.parse(inspect.getsource(module)).body
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
        ):
            value = getattr(module, node.targets[0].id)
            if isinstance(value, str) and value.startswith("teamctl:"):
                yield value, inspect.cleandoc(str(after.value.value))


SHARED_KEY_SAMPLES = {"model": "MODEL", "api_base": "API_BASE"}
"""Sample arguments of the keys shared by every run and team (their digest is shown)."""


def shared_key_rows(module: Any) -> Iterator[tuple[str, str]]:
    """(key pattern, docstring) for every module-level function of `module` that builds a key
    shared by every run and team (a digest of its arguments ends it)."""
    for name, function in vars(module).items():
        if (
            name.startswith("_")
            or not inspect.isfunction(function)
            or function.__module__ != module.__name__
            or not function.__doc__
        ):
            continue
        params = list(inspect.signature(function).parameters)
        value = function(*(SHARED_KEY_SAMPLES[p] for p in params))
        if isinstance(value, str) and value.startswith("teamctl:"):
            prefix = value.rpartition(":")[0]
            yield f"{prefix}:<digest>", inspect.cleandoc(function.__doc__)


def redis_keys_page() -> str:
    from teamctl.shared.keys import KeySpace, LimitKeys, RunKeys, TeamKeys

    run, team = RunKeys("runid0"), TeamKeys("teamname")
    sections: list[tuple[str, Any, type]] = [
        ("Every key space (a run's; a team's start `teamctl:team:{<team>}`)", run, KeySpace),
        ("A planned run's keys", run, RunKeys),
        ("A persistent team's keys", team, TeamKeys),
        (
            "A provider account's limits (`<account>`: a keyed digest of the provider, its key and "
            "api_base; `<model>`: the model string's digest)",
            LimitKeys("a" * 32),
            LimitKeys,
        ),
    ]
    import teamctl.shared.keys as keys_module

    lines = [
        "# Redis keys",
        "",
        "Every key teamctl writes, built in `shared/keys.py` and listed from it at each docs "
        "build. The `{...}` part is the hash tag: a run's or a team's keys share one "
        "cluster slot, so each Lua script touches one slot.",
        "",
    ]
    lines += ["## Indexes", "", *_key_table(index_rows(keys_module)), ""]
    lines += ["## Shared by every run and team", "", *_key_table(shared_key_rows(keys_module))]
    lines.append("")
    for title, space, owner in sections:
        lines += [f"## {title}", "", *_key_table(key_rows(space, owner)), ""]
    return "\n".join(lines)


def _key_table(rows: Iterator[tuple[str, str]]) -> list[str]:
    table = Table(["key", "what"])
    for key, doc in rows:
        table.add([f"`{key}`"], f"`{key}`", doc)
    return table.lines()


# --- performance -----------------------------------------------------------------------------


def performance_page() -> str:
    """bench/results.md, as `scripts/bench` last wrote it, under a line on how to read it."""
    results = (ROOT / "bench" / "results.md").read_text(encoding="utf-8")
    body = results.split("\n", 1)[1]  # its own title replaced by the page's
    return (
        "# Performance\n\nWhat `scripts/bench` measured last (it rewrites `bench/results.md`). "
        "Every figure has a baseline measured in the same run on the same machine; the ratio "
        "is the figure over that baseline, and a goal, where there is one, says what the "
        "figure is held to.\n" + body
    )
