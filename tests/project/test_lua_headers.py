"""Every Lua script's header says what it takes, and what it says holds: the library files it
uses are the ones it calls, and each Python call site passes the KEYS and ARGV it lists, counted
at every call in the suite (Scripts checks them) and here for every call site whose lists are
written out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from teamctl.shared.redis.scripts import (
    ScriptCallError,
    headers,
    library,
    parse_header,
    script_texts,
)

ROOT = Path(__file__).resolve().parents[2]
CALLERS = ("shared", "coordinator", "worker", "teamctl", "bench")
"""Where scripts are called: the package's folders, and the benchmarks."""
NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
DEFINED = re.compile(r"^local (?:function )?([A-Za-z_][\w]*(?:, *[A-Za-z_]\w*)*)", re.MULTILINE)


def code_only(text: str) -> str:
    """Lua text with its comments and string literals blanked: what is left names what it calls."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text[i] in "'\"":
            quote, i = text[i], i + 1
            while i < len(text) and text[i] != quote:
                i += 2 if text[i] == "\\" else 1
            out.append("''")
            i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def library_names() -> dict[str, str]:
    """Each top-level name the library defines, by the name of the file that defines it."""
    owner: dict[str, str] = {}
    for lib, text in library().items():
        for match in DEFINED.finditer(text):
            for name in match.group(1).split(","):
                assert name.strip() not in owner, f"{name.strip()} is defined twice in _lib/"
                owner[name.strip()] = lib
    return owner


def used_libraries(text: str, own: str = "") -> set[str]:
    """The library files whose names `text` calls (not counting its own file `own`)."""
    owner = library_names()
    return {owner[n] for n in NAME.findall(code_only(text)) if n in owner} - {own}


@pytest.mark.parametrize("name", sorted(script_texts()))
def test_a_script_header_has_its_tags(name: str) -> None:
    text = script_texts()[name]
    for tag in ("access", "KEYS", "ARGV"):
        assert re.search(rf"^-- {tag}:", text, re.MULTILINE), f"{name}.lua has no `-- {tag}:`"
    header = headers()[name]
    for names in (header.keys, header.args):
        for position, item in enumerate(names):
            assert re.fullmatch(r"\w+(\?|\.\.\.)?", item), f"{name}.lua: {item!r} is no name"
            if item.endswith("..."):
                assert position == len(names) - 1, f"{name}.lua: only the last may be a tail"
        optional = [i for i, item in enumerate(names) if item.endswith("?")]
        assert optional == list(range(len(names) - len(optional), len(names))), (
            f"{name}.lua: optional names come last"
        )


@pytest.mark.parametrize("name", sorted(script_texts()))
def test_a_script_uses_exactly_the_library_files_it_calls(name: str) -> None:
    assert set(headers()[name].uses) == used_libraries(script_texts()[name])


@pytest.mark.parametrize("name", sorted(library()))
def test_a_library_file_uses_exactly_the_files_it_calls(name: str) -> None:
    text = library()[name]
    assert set(parse_header(name, text).uses) == used_libraries(text, own=name)


@pytest.mark.parametrize("name", sorted(script_texts()))
def test_a_script_binds_its_keys_and_argv_to_named_locals(name: str) -> None:
    """KEYS[n] and ARGV[n] are read once each, at the top, into the locals the header names (a
    tail into `<name>_from`, its first index); the body uses the names."""
    header, text = headers()[name], code_only(script_texts()[name])
    for table, names in (("KEYS", header.keys), ("ARGV", header.args)):
        for position, item in enumerate(names, start=1):
            local = item.rstrip("?")
            if local.endswith("..."):
                local = local.removesuffix("...") + "_from"
                bound = rf"\b{local}\s*=\s*{position}\b"
            else:
                bound = rf"local [\w, ]*\b{local}\b[\w, ]*=[^\n]*\b{table}\[{position}\]"
            assert re.search(bound, text), f"{name}.lua binds no {table}[{position}] to {local}"
        indexed = re.findall(rf"{table}\[\d+\]", text)
        assert len(indexed) == len([n for n in names if not n.endswith("...")]), (
            f"{name}.lua reads {table} by number in its body: {indexed}"
        )


def call_sites() -> list[tuple[str, int, str, ast.Call]]:
    """(file, line, script, call) for every call of a script in the package."""
    found = []
    for folder in CALLERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                script = isinstance(node, ast.Call) and called_script(node.func)
                if script:
                    found.append((str(path.relative_to(ROOT)), node.lineno, script, node))
    return found


def called_script(func: ast.expr) -> str | None:
    """The script `func` names: `scripts["<script>"]`, or `self._script("<script>")`."""
    named: ast.expr | None = None
    if isinstance(func, ast.Subscript):
        named = func.slice
    elif isinstance(func, ast.Call) and len(func.args) == 1:
        named = func.args[0]
    if isinstance(named, ast.Constant) and named.value in headers():
        return str(named.value)
    return None


def passed(call: ast.Call, which: str, script: str) -> list[str]:
    """What the call's `which` (keys or args) list passes: as many values as it writes out, or,
    for a list built elsewhere or splicing a sequence in, the fewest the header takes (the
    suite's calls check those)."""
    for keyword in call.keywords:
        if keyword.arg == which:
            value = keyword.value
            if isinstance(value, (ast.List, ast.Tuple)) and not any(
                isinstance(item, ast.Starred) for item in value.elts
            ):
                return [""] * len(value.elts)
            header = headers()[script]
            names = header.keys if which == "keys" else header.args
            return [""] * sum(1 for n in names if not n.endswith(("?", "...")))
    return []


def test_every_script_has_a_call_site_and_none_names_a_missing_script() -> None:
    called = {script for _, _, script, _ in call_sites()}
    assert called == set(headers())


def test_every_written_out_call_passes_what_the_header_lists() -> None:
    wrong = []
    for path, line, script, call in call_sites():
        try:
            headers()[script].check(passed(call, "keys", script), passed(call, "args", script))
        except ScriptCallError as exc:
            wrong.append(f"{path}:{line}: {exc}")
    assert wrong == []


def test_a_call_that_does_not_fit_the_header_is_refused_before_redis() -> None:
    release = headers()["release"]
    release.check(["k"] * 6, ["token", "reason"])
    with pytest.raises(ScriptCallError, match=r"release.lua takes 6 KEYS .* the call passed 5"):
        release.check(["k"] * 5, ["token", "reason"])
    with pytest.raises(ScriptCallError, match=r"release.lua takes 2 ARGV .* the call passed 3"):
        release.check(["k"] * 6, ["token", "reason", "more"])
    complete = headers()["complete"]
    complete.check(["k"] * 8, ["a"] * 6)
    complete.check(["k"] * 40, ["a"] * 6)
    with pytest.raises(ScriptCallError, match=r"complete.lua takes 8.. KEYS"):
        complete.check(["k"] * 7, ["a"] * 6)
