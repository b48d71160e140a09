"""A workspace kept in Redis, for members on hosts that share no disk: each file under the space's
keys with a version, saved by fenced, version-checked writes within caps, read in pages.

A run's (or a team's) workspace is either a directory on the host that created it (`local`) or
these keys (`redis`); workers materialize the latter into a directory of their own for an
attempt or turn (shared/workspace/mirror.py), and refuse work on a local one created on
another host (workspace_caps.check_workspace_host)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit

import redis
from teamctl.shared.keys import KeySpace
from teamctl.shared.redis.connection import outage_of, same_server
from teamctl.shared.redis.scripts import Scripts
from teamctl.shared.workspace.caps import (
    PATH_RECORD_BYTES,
    FileCaps,
    WorkspaceSetting,
    WorkspaceStore,
)

PAGE_FILES = 100
"""Files per HSCAN page and per HMGET: a big workspace never costs Redis one long command."""
PAGE_BLOBS = 8
"""Contents per MGET: a reply of a few files (1 MiB each by default), never a whole workspace."""
UNADOPTED_BLOB_TTL_MS = 3_600_000
"""How long content written for a save that never ran (its writer died) is kept."""
DELETED_KEEP_MS = 600_000
"""How long a deleted path's version record is kept: a writer races on a file between the pull
before a tool call and the push after it, and within this it is refused naming the delete (a
mirror pulls the delete like any other change). Ten minutes is five times the longest default
tool call (Python tools' 120 s; bash and MCP calls 60 s). Past it the record goes, and nothing
depends on it: a writer that saw the file is still refused (no version is used twice), one that
saw none may create it, and a mirror takes a file whose record is gone as deleted."""
PRUNE_BATCH = 100
"""Deleted records dropped per script call (file_prune.lua): a bounded walk of the index."""


class SaveVerdict(StrEnum):
    """What file_save.lua did with one file."""

    SAVED = "saved"
    CONFLICT = "conflict"
    FILE_TOO_BIG = "file_too_big"
    TOO_MANY_FILES = "too_many_files"
    WORKSPACE_FULL = "workspace_full"
    EXPIRED = "expired"
    STALE = "stale"


@dataclass(frozen=True)
class SaveOutcome:
    """A save's verdict, the file's version after it (the current one when refused), and the
    workspace's rev after it."""

    verdict: SaveVerdict
    version: int
    rev: int


@dataclass(frozen=True)
class Fence:
    """What a save must still hold: a task's claim (`task`: the task hash and its token), or a
    lease kept as a string key (`turn`: a teammate's turn key, or the lead's lease, and the
    value it must still hold)."""

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
    """The store a new run or team uses: the setting, or for `auto` the directory only when no
    other host can reach the Redis at all (a unix socket, as the embedded server's). A TCP
    URL, loopback included, says how this host reaches the Redis, not who else does: a worker
    elsewhere may reach it by another address, so its files go to Redis."""
    if setting != "auto":
        return setting
    return "local" if _unix_socket(redis_url) else "redis"


def _unix_socket(redis_url: str) -> bool:
    try:
        return urlsplit(redis_url).scheme == "unix"
    except ValueError:
        return False


class WorkspaceFiles:
    """The files of one space's workspace in Redis (bytes in, bytes out)."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: KeySpace,
        caps: FileCaps | None = None,
        fence: Fence | None = None,
        deleted_keep_ms: int = DELETED_KEEP_MS,
    ) -> None:
        # Contents are bytes: a decoding client would mangle any file that is not UTF-8. The
        # client of its own keeps the retry policy of `conn` (a run's redis_outage_s).
        self._own = bool(conn.connection_pool.connection_kwargs.get("decode_responses"))
        self.conn = same_server(conn, decode=False, outage_s=outage_of(conn)) if self._own else conn
        self.keys = keys
        self.caps = caps or FileCaps()
        self.fence = fence
        self.deleted_keep_ms = deleted_keep_ms
        self.scripts = Scripts(self.conn)

    def close(self) -> None:
        """Close the client this made for itself (none when given a bytes client)."""
        if self._own:
            self.conn.close()

    def rev(self) -> int:
        """Saves ever made to the workspace: unchanged means nothing to fetch."""
        return int(self.conn.hget(self.keys.files_info, "rev") or 0)

    def versions(self) -> dict[str, int]:
        """Every path's version, recently deleted files' included (HSCAN, in pages)."""
        return {
            _path(raw): int(version)
            for raw, version in self.conn.hscan_iter(self.keys.file_versions, count=PAGE_FILES)
        }

    def contents(self, paths: list[str]) -> dict[str, bytes]:
        """The content of each path that holds a file (deleted ones are left out)."""
        return self.fetch(paths)[0]

    def fetch(self, paths: list[str]) -> tuple[dict[str, bytes], set[str]]:
        """The content of each path that holds a file, and the paths that hold none. A path in
        neither had its content replaced between the two reads: read it again."""
        found: dict[str, bytes] = {}
        deleted: set[str] = set()
        for at in range(0, len(paths), PAGE_FILES):
            page = paths[at : at + PAGE_FILES]
            blobs = self._blob_ids(page)
            deleted.update(path for path, blob in zip(page, blobs, strict=True) if not blob)
            held = [(path, blob) for path, blob in zip(page, blobs, strict=True) if blob]
            if not held:
                continue
            for part in range(0, len(held), PAGE_BLOBS):
                some = held[part : part + PAGE_BLOBS]
                datas = self.conn.mget([self.keys.file_blob(blob) for _, blob in some])
                found.update(
                    (path, data)
                    for (path, _), data in zip(some, datas, strict=True)
                    if data is not None
                )
        return found, deleted

    def listing(self) -> list[FileEntry]:
        """Every stored file with its size and version, by path."""
        versions = self.versions()
        paths = sorted(versions)
        entries: list[FileEntry] = []
        for at in range(0, len(paths), PAGE_FILES):
            page = paths[at : at + PAGE_FILES]
            held = [
                (path, blob) for path, blob in zip(page, self._blob_ids(page), strict=True) if blob
            ]
            pipe = self.conn.pipeline(transaction=False)
            for _, blob in held:
                pipe.strlen(self.keys.file_blob(blob))
            entries += [
                FileEntry(path, int(size), versions[path])
                for (path, _), size in zip(held, pipe.execute(), strict=True)
            ]
        return entries

    def save(self, path: str, seen_version: int, content: bytes | None) -> SaveOutcome:
        """Save `content` at `path` (None deletes it) if its version is still `seen_version`
        (0: the writer saw no file there, and there still is none).

        The content goes first, by a plain SET under a new blob key with a TTL (Redis reads it
        as it arrives, never stalled by one big write); file_save.lua then adopts it or, when
        refused, deletes it. A save refused for the workspace's bytes while deleted paths' records
        count toward them drops those records and is tried once more; deleted records past their
        keep go a batch per save."""
        if content is not None and len(content) > self.caps.file_max_bytes:
            return SaveOutcome(SaveVerdict.FILE_TOO_BIG, seen_version, -1)  # never sent
        outcome, old, deleted = self._save_once(path, seen_version, content)
        if outcome.verdict is SaveVerdict.WORKSPACE_FULL and deleted:
            self.drop_deleted(keep_ms=0)
            outcome, old, _ = self._save_once(path, seen_version, content)
        if old:
            self.drop_deleted(self.deleted_keep_ms, batches=1)
        return outcome

    def drop_deleted(self, keep_ms: int, batches: int | None = None) -> int:
        """Drop the records of paths deleted at least `keep_ms` ago, PRUNE_BATCH per script
        call, for at most `batches` calls (None: until none is left); how many went."""
        keys, dropped, calls = self.keys, 0, 0
        while batches is None or calls < batches:
            gone, left = self.scripts["file_prune"](
                keys=[keys.files, keys.file_versions, keys.files_info, keys.file_deletions],
                args=[keep_ms, PRUNE_BATCH, PATH_RECORD_BYTES],
            )
            dropped, calls = dropped + int(gone), calls + 1
            if not int(left):
                break
        return dropped

    def _save_once(
        self, path: str, seen_version: int, content: bytes | None
    ) -> tuple[SaveOutcome, int, int]:
        """One save through file_save.lua; with it, how many deleted records are past their
        keep and how many there are."""
        keys, fence, caps = self.keys, self.fence, self.caps
        new_blob = secrets.token_hex(16)
        old_blob = self._blob_ids([path])[0] or ""
        if content is not None:
            self.conn.set(keys.file_blob(new_blob), content, px=UNADOPTED_BLOB_TTL_MS)
        reply = self.scripts["file_save"](
            keys=[
                keys.files,
                keys.file_versions,
                keys.files_info,
                fence.key if fence else keys.files_info,
                keys.file_blob(new_blob),
                keys.file_blob(old_blob) if old_blob else keys.files_info,
                keys.file_deletions,
            ],
            args=[
                _raw(path),
                seen_version,
                "delete" if content is None else "put",
                new_blob,
                old_blob,
                caps.file_max_bytes,
                caps.workspace_max_bytes,
                caps.workspace_max_files,
                fence.kind if fence else "none",
                fence.token if fence else "",
                PATH_RECORD_BYTES,
                self.deleted_keep_ms,
            ],
        )
        outcome = SaveOutcome(SaveVerdict(reply[0].decode()), int(reply[1]), int(reply[2]))
        return outcome, int(reply[3]), int(reply[4])

    def _blob_ids(self, paths: list[str]) -> list[str | None]:
        """The blob id each path's content is under (None: no file)."""
        ids = self.conn.hmget(self.keys.files, [_raw(p) for p in paths])
        return [blob.decode() if blob else None for blob in ids]


def _raw(path: str) -> bytes:
    """A path as Redis keeps it (a file name that is not UTF-8 round-trips)."""
    return path.encode("utf-8", "surrogateescape")


def _path(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
