"""Loads every Lua script in shared/lua once per connection; callers use them by file name."""

from __future__ import annotations

from importlib import resources

import redis
from redis.commands.core import Script

LIB = "_lib.lua"


class Scripts:
    """The registered scripts; `_lib.lua` is prepended to each so they share its helpers."""

    def __init__(self, conn: redis.Redis) -> None:
        folder = resources.files("teamctl.shared").joinpath("lua")
        lib = folder.joinpath(LIB).read_text(encoding="utf-8")
        self._scripts: dict[str, Script] = {
            entry.name.removesuffix(".lua"): conn.register_script(
                lib + "\n" + entry.read_text(encoding="utf-8"))
            for entry in folder.iterdir()
            if entry.name.endswith(".lua") and entry.name != LIB
        }

    def __getitem__(self, name: str) -> Script:
        return self._scripts[name]
