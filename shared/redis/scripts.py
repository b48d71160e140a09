"""The Lua scripts in shared/redis/lua: read once per process, registered once per connection.

Scripts sit in one folder per concern (board, bus, calls, limits, runs, teams, turns, workspace)
and are named by file alone, so a name is unique across folders. Their shared helpers sit in
`_lib/`, one file per concern; a script's header names the ones it uses (`-- uses: tasks,
messages`) and only those are prepended to it. `_guarded.lua` wraps a script for a turn's
exactly-once writes.

Every script's header also says how a guarded store runs it (`-- access: read|upkeep|write`) and
names its KEYS and ARGV in order (`-- KEYS: task_key, ready_key, dependent_keys...`), the locals
it binds them to at its top: a name ending in `?` may be left off, one ending in `...` stands for
any number (bound as `<name>_from`, its first index), both only at the end. Every call is checked
against those counts (a mismatch is a bug at the call site, raised before Redis runs it)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal, cast

import redis
from redis.commands.core import Script

LIB_FOLDER = "_lib"
GUARD = "_guarded.lua"
GUARD_BODY = "--BODY--"
REVOKED = "TURN_REVOKED"
ACCESSES = ("read", "upkeep", "write")
"""How a guarded store runs a script. `read`: plainly, since reads need no replay and recording
their (large) results would cost the server for nothing. `upkeep`: plainly too, since it keeps
the team's bounds after a write and writes nothing of the turn's own, so a replayed tool call
runs it again rather than skipping it. `write`: guarded, run once per tool call."""
Access = Literal["read", "upkeep", "write"]
_TAG = re.compile(r"^-- (uses|access|KEYS|ARGV):(.*)$")


@dataclass(frozen=True)
class ScriptHeader:
    """What a script's (or a library file's) header says: the library files it uses, how a
    guarded store runs it, and its KEYS and ARGV by name, in order."""

    name: str
    uses: tuple[str, ...] = ()
    access: Access = "write"
    keys: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    def check(self, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Refuse a call whose KEYS or ARGV do not fit the header: too few or too many."""
        for what, names, given in (("KEYS", self.keys, len(keys)), ("ARGV", self.args, len(args))):
            least, most = _counts(names)
            if given < least or (most is not None and given > most):
                wanted = f"{least}" if most == least else f"{least}..{most or ''}"
                raise ScriptCallError(
                    f"{self.name}.lua takes {wanted} {what} "
                    f"({', '.join(names) or 'none'}), the call passed {given}"
                )


class ScriptCallError(TypeError):
    """A script was called with KEYS or ARGV its header does not list: a bug in the caller."""


def _counts(names: Sequence[str]) -> tuple[int, int | None]:
    """The fewest and most values a header's list of names takes (None: no bound)."""
    least = sum(1 for n in names if not n.endswith(("?", "...")))
    most = None if any(n.endswith("...") for n in names) else len(names)
    return least, most


def parse_header(name: str, text: str) -> ScriptHeader:
    """The header of a script or library file: its leading comment lines' tags. A tag's list
    that ends with a comma goes on in the next comment line."""
    tags: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        if current:
            tags[current] += " " + line.removeprefix("--").strip()
        else:
            match = _TAG.match(line)
            if match:
                current = match.group(1)
                tags[current] = match.group(2).strip()
        if current and not tags[current].endswith(","):
            current = ""
    access = tags.get("access", "write")
    if access not in ACCESSES:
        raise RuntimeError(f"{name}.lua: access must be one of {', '.join(ACCESSES)}")
    return ScriptHeader(
        name=name,
        uses=_names(tags.get("uses", "")),
        access=cast(Access, access),
        keys=_names(tags.get("KEYS", "")),
        args=_names(tags.get("ARGV", "")),
    )


def _names(listed: str) -> tuple[str, ...]:
    """The names of a tag's comma-separated list ('none' or nothing: no names)."""
    names = tuple(n.strip() for n in listed.split(",") if n.strip())
    return () if names == ("none",) else names


def _lua_files(folder: Traversable) -> dict[str, str]:
    """Every .lua file's text below `folder` by name (without .lua), but for folders whose name
    starts with `_` (the library); a name is unique."""
    texts: dict[str, str] = {}
    folders = [folder]
    while folders:
        for entry in folders.pop().iterdir():
            if entry.is_dir():
                if not entry.name.startswith("_"):
                    folders.append(entry)
            elif entry.name.endswith(".lua"):
                name = entry.name.removesuffix(".lua")
                if name in texts:
                    raise RuntimeError(f"two Lua files are named {entry.name}")
                texts[name] = entry.read_text(encoding="utf-8")
    return texts


@functools.cache
def _root() -> Traversable:
    return resources.files("teamctl.shared.redis").joinpath("lua")


@functools.cache
def library() -> dict[str, str]:
    """The library files' texts by name (`_lib/tasks.lua` is `tasks`), read once per process."""
    return _lua_files(_root().joinpath(LIB_FOLDER))


@functools.cache
def script_texts() -> dict[str, str]:
    """Every script's own text by name, read once per process (they never change while it
    runs); the library and the guard are not scripts."""
    return {name: text for name, text in _lua_files(_root()).items() if not name.startswith("_")}


@functools.cache
def headers() -> dict[str, ScriptHeader]:
    """Every script's header by name."""
    return {name: parse_header(name, text) for name, text in script_texts().items()}


def _prelude(uses: Sequence[str]) -> str:
    """The library files `uses` names, with the ones they use in turn, each once and after
    those it uses."""
    texts = library()
    order: list[str] = []

    def add(name: str, via: str) -> None:
        if name not in texts:
            raise RuntimeError(f"{via}.lua uses {name}, which is no file in {LIB_FOLDER}/")
        if name in order:
            return
        for used in parse_header(name, texts[name]).uses:
            add(used, name)
        order.append(name)

    for name in uses:
        add(name, "a script")
    return "".join(texts[name] + "\n" for name in order)


@functools.cache
def sources() -> dict[str, str]:
    """Every script's text by name (without .lua), the library files its header uses
    prepended."""
    return {name: _prelude(headers()[name].uses) + text for name, text in script_texts().items()}


@functools.cache
def guarded_source(name: str) -> str:
    """The script `name` wrapped by _guarded.lua: token-checked, run once per call key."""
    guard = _root().joinpath(GUARD).read_text(encoding="utf-8")
    return _prelude(headers()[name].uses) + guard.replace(GUARD_BODY, script_texts()[name])


class TurnRevokedError(RuntimeError):
    """A guarded write was refused: the turn that made it no longer holds its lease."""


class Scripts:
    """The scripts registered on one connection, each on first use (redis-py then runs it by
    EVALSHA and loads it into the server only if the server does not have it yet)."""

    revoked = False
    """Plain scripts are never refused for a lost turn lease (GuardedScripts may be)."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn
        self._scripts: dict[str, Script] = {}

    def __getitem__(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.conn.register_script(sources()[name])
        header = headers()[name]

        def call(keys: Sequence[str] = (), args: Sequence[Any] = (), **options: Any) -> Any:
            header.check(keys, args)
            return script(keys=keys, args=args, **options)

        return call

    def guarded_script(self, name: str) -> Script:
        """The guarded variant of `name` (see _guarded.lua), registered once."""
        key = GUARD + name
        script = self._scripts.get(key)
        if script is None:
            script = self._scripts[key] = self.conn.register_script(guarded_source(name))
        return script

    def guarded(self, guard: WriteGuard) -> GuardedScripts:
        """These scripts, each call run exactly once for `guard`'s tool call."""
        return GuardedScripts(self, guard)


@dataclass(frozen=True)
class WriteGuard:
    """One tool call of a turn: its lease (turn key and token) and where outcomes are kept."""

    turn_key: str
    effects_key: str
    token: str
    call_key: str


@dataclass
class GuardedScripts:
    """Scripts whose every call is guarded: the n-th call of a script within a tool call is
    recorded under one id, so a replayed tool call gets the first outcomes back."""

    scripts: Scripts
    guard: WriteGuard
    revoked: bool = False
    """Set once a write was refused for a lost lease: the caller stops the turn."""
    _calls: dict[str, int] = field(default_factory=dict)

    @property
    def conn(self) -> redis.Redis:
        return self.scripts.conn

    def __getitem__(self, name: str) -> Any:
        def call(keys: Sequence[str] = (), args: Sequence[Any] = ()) -> Any:
            return self._call(name, list(keys), list(args))

        return call

    def guarded(self, guard: WriteGuard) -> GuardedScripts:
        """The same scripts guarded for another tool call."""
        return GuardedScripts(self.scripts, guard)

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if headers()[name].access != "write":
            return self.scripts[name](keys=keys, args=args)
        headers()[name].check(keys, args)
        # The n-th call of a script in one tool call: a replay makes the same calls in the
        # same order, since each next call depends only on the outcomes it is given back.
        n = self._calls.get(name, 0)
        self._calls[name] = n + 1
        call_key = f"{self.guard.call_key}:{name}:{n}"
        try:
            return self.scripts.guarded_script(name)(
                keys=[*keys, self.guard.turn_key, self.guard.effects_key],
                args=[*args, self.guard.token, call_key],
            )
        except redis.ResponseError as exc:
            if str(exc).startswith(REVOKED):
                self.revoked = True
                raise TurnRevokedError(str(exc)) from exc
            raise
