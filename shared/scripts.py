"""The Lua scripts in shared/lua: read once per process, registered once per connection."""

from __future__ import annotations

import functools
from importlib import resources

import redis
from redis.commands.core import Script

LIB = "_lib.lua"


@functools.cache
def sources() -> dict[str, str]:
    """Every script's text by file name (without .lua), `_lib.lua` prepended so they share its
    helpers; read once per process, since the files never change while it runs."""
    folder = resources.files("teamctl.shared").joinpath("lua")
    lib = folder.joinpath(LIB).read_text(encoding="utf-8")
    return {entry.name.removesuffix(".lua"): lib + "\n" + entry.read_text(encoding="utf-8")
            for entry in folder.iterdir()
            if entry.name.endswith(".lua") and entry.name != LIB}


class Scripts:
    """The scripts registered on one connection, each on first use (redis-py then runs it by
    EVALSHA and loads it into the server only if the server does not have it yet)."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn
        self._scripts: dict[str, Script] = {}

    def __getitem__(self, name: str) -> Script:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.conn.register_script(sources()[name])
        return script
