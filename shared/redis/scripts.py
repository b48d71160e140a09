"""The Lua scripts in shared/redis/lua: read once per process, registered once per connection.

Scripts sit in one folder per concern (board, bus, calls, runs, teams, turns, workspace) and are
named by file alone, so a name is unique across folders; `_lib.lua` and `_guarded.lua` sit above
them."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script

LIB = "_lib.lua"
GUARD = "_guarded.lua"
GUARD_BODY = "--BODY--"
REVOKED = "TURN_REVOKED"
READS = frozenset({"team_peek", "request_read", "snapshot_page", "history",
                   "next_ready"})
"""Scripts a guarded store runs plainly: reads need no replay, and recording their (large)
results would cost the server for nothing."""
UPKEEP = frozenset({"lead_inbox_fold", "team_bus_compact"})
"""Scripts a guarded store also runs plainly: the team's bounds kept after a write, no write of
the turn's own, so a replayed tool call runs them again rather than skipping them."""


@functools.cache
def _texts() -> dict[str, str]:
    """Every .lua file's text by file name, read once per process (they never change while it
    runs)."""
    texts: dict[str, str] = {}
    folders = [resources.files("teamctl.shared.redis").joinpath("lua")]
    while folders:
        for entry in folders.pop().iterdir():
            if entry.is_dir():
                folders.append(entry)
            elif entry.name.endswith(".lua"):
                if entry.name in texts:
                    raise RuntimeError(f"two Lua scripts are named {entry.name}")
                texts[entry.name] = entry.read_text(encoding="utf-8")
    return texts


@functools.cache
def sources() -> dict[str, str]:
    """Every script's text by name (without .lua), `_lib.lua` prepended so they share its
    helpers."""
    texts = _texts()
    return {name.removesuffix(".lua"): texts[LIB] + "\n" + text
            for name, text in texts.items() if not name.startswith("_")}


@functools.cache
def guarded_source(name: str) -> str:
    """The script `name` wrapped by _guarded.lua: token-checked, run once per call key."""
    texts = _texts()
    return texts[LIB] + "\n" + texts[GUARD].replace(GUARD_BODY, texts[f"{name}.lua"])


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
        return script

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
        if name in READS or name in UPKEEP:
            return self.scripts[name](keys=keys, args=args)
        # The n-th call of a script in one tool call: a replay makes the same calls in the
        # same order, since each next call depends only on the outcomes it is given back.
        n = self._calls.get(name, 0)
        self._calls[name] = n + 1
        call_key = f"{self.guard.call_key}:{name}:{n}"
        try:
            return self.scripts.guarded_script(name)(
                keys=[*keys, self.guard.turn_key, self.guard.effects_key],
                args=[*args, self.guard.token, call_key])
        except redis.ResponseError as exc:
            if str(exc).startswith(REVOKED):
                self.revoked = True
                raise TurnRevokedError(str(exc)) from exc
            raise
