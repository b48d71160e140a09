"""A workspace kept in Redis, for members on hosts that share no disk: each file under the space's
keys with a version, saved by fenced, version-checked writes within caps, read in pages.

A run's (or a team's) workspace is either a directory on the coordinator's host (`local`) or
these keys (`redis`); workers materialize the latter into a directory of their own for an
attempt or turn (shared/agent/workspace_mirror.py)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit

import redis
from teamctl.shared.keys import KeySpace
from teamctl.shared.redis.connection import same_server
from teamctl.shared.redis.scripts import Scripts
from teamctl.shared.workspace_caps import FileCaps, WorkspaceSetting, WorkspaceStore

PAGE_FILES = 100
"""Files per HSCAN page and per HMGET: a big workspace never costs Redis one long command."""
LOCAL_HOSTS = frozenset({"localhost"})


class SaveVerdict(StrEnum):
    """What file_save.lua did with one file."""

    SAVED = "saved"
    CONFLICT = "conflict"
    FILE_TOO_BIG = "file_too_big"
    WORKSPACE_FULL = "workspace_full"
    STALE = "stale"


@dataclass(frozen=True)
class SaveOutcome:
    """A save's verdict, and the file's version after it (the current one when refused)."""

    verdict: SaveVerdict
    version: int


@dataclass(frozen=True)
class Fence:
    """What a save must still hold: a task's claim (`task`: the task hash and its token) or a
    teammate's turn (`turn`: the turn key and its token)."""

    kind: Literal["task", "turn"]
    key: str
    token: str


@dataclass(frozen=True)
class FileEntry:
    """One stored file: its path, size and version."""

    path: str
    size_bytes: int
    version: int


def choose_store(setting: WorkspaceSetting, redis_url: str) -> WorkspaceStore:
    """The store a new run or team uses: the setting, or for `auto` the directory when the Redis
    is reachable from this host only (a unix socket, as the embedded server's, or a loopback
    address), since then every worker shares this host's disk."""
    if setting != "auto":
        return setting
    return "local" if _this_host_only(redis_url) else "redis"


def _this_host_only(redis_url: str) -> bool:
    try:
        parts = urlsplit(redis_url)
        host = parts.hostname
    except ValueError:
        return False
    if parts.scheme == "unix":
        return True
    if parts.scheme not in ("redis", "rediss") or not host:
        return False
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WorkspaceFiles:
    """The files of one space's workspace in Redis (bytes in, bytes out)."""

    def __init__(self, conn: redis.Redis, keys: KeySpace, caps: FileCaps | None = None,
                 fence: Fence | None = None) -> None:
        # Contents are bytes: a decoding client would mangle any file that is not UTF-8.
        self.conn = (conn if not conn.connection_pool.connection_kwargs.get("decode_responses")
                     else same_server(conn, decode=False))
        self.keys = keys
        self.caps = caps or FileCaps()
        self.fence = fence
        self.scripts = Scripts(self.conn)

    def rev(self) -> int:
        """Saves ever made to the workspace: unchanged means nothing to fetch."""
        return int(self.conn.hget(self.keys.files_info, "rev") or 0)

    def versions(self) -> dict[str, int]:
        """Every path's version, deleted files' included (HSCAN, in pages)."""
        return {path.decode("utf-8", "surrogateescape"): int(version)
                for path, version in self._scan(self.keys.file_versions)}

    def contents(self, paths: list[str]) -> dict[str, bytes]:
        """The content of each path that holds a file (deleted ones are left out)."""
        found: dict[str, bytes] = {}
        for at in range(0, len(paths), PAGE_FILES):
            page = paths[at:at + PAGE_FILES]
            for path, data in zip(page, self.conn.hmget(self.keys.files, [
                    p.encode("utf-8", "surrogateescape") for p in page]), strict=True):
                if data is not None:
                    found[path] = data
        return found

    def listing(self) -> list[FileEntry]:
        """Every stored file with its size and version, by path."""
        versions = self.versions()
        paths = sorted(versions)
        entries: list[FileEntry] = []
        for at in range(0, len(paths), PAGE_FILES):
            page = paths[at:at + PAGE_FILES]
            pipe = self.conn.pipeline(transaction=False)
            for path in page:
                pipe.hexists(self.keys.files, path.encode("utf-8", "surrogateescape"))
                pipe.hstrlen(self.keys.files, path.encode("utf-8", "surrogateescape"))
            replies = pipe.execute()
            entries += [FileEntry(path, int(replies[2 * i + 1]), versions[path])
                        for i, path in enumerate(page) if replies[2 * i]]
        return entries

    def save(self, path: str, seen_version: int, content: bytes | None) -> SaveOutcome:
        """Save `content` at `path` (None deletes it) if its version is still `seen_version`."""
        fence = self.fence
        keys = self.keys
        reply = self.scripts["file_save"](
            keys=[keys.files, keys.file_versions, keys.files_info,
                  fence.key if fence else keys.files_info],
            args=[path.encode("utf-8", "surrogateescape"), seen_version,
                  "delete" if content is None else "put", content or b"",
                  self.caps.file_max_bytes, self.caps.workspace_max_bytes,
                  fence.kind if fence else "none", fence.token if fence else ""])
        return SaveOutcome(SaveVerdict(reply[0].decode()), int(reply[1]))

    def _scan(self, key: str) -> Iterator[tuple[bytes, bytes]]:
        yield from self.conn.hscan_iter(key, count=PAGE_FILES)
