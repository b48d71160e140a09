"""Loads the Lua scripts in shared/lua once per connection, each behind a typed board method."""

from __future__ import annotations

from importlib import resources

import redis
from redis.commands.core import Script


def _source(name: str) -> str:
    folder = resources.files("shared").joinpath("lua")
    return folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The registered scripts; `_lib.lua` is prepended so every script shares its helpers."""

    NAMES = ("create", "claim", "heartbeat", "complete", "fail", "block_stalled", "reclaim",
             "publish", "read_unread")

    def __init__(self, conn: redis.Redis) -> None:
        lib = _source("_lib")
        self._scripts: dict[str, Script] = {
            name: conn.register_script(lib + "\n" + _source(name)) for name in self.NAMES
        }

    def __getitem__(self, name: str) -> Script:
        return self._scripts[name]
