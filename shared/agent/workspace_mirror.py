"""A worker's local copy of a workspace kept in Redis, for one attempt or turn: fetched when it
starts, brought up to date before each tool call and saved back after it, so `bash`, Python
tools and MCP servers work in a real directory while members on other hosts see their files.

A save names the version the mirror last had; when another member saved the file meanwhile, the
save is refused (shared/redis/lua/workspace/file_save.lua), the mirror takes the other member's
version, and the tool call that made the change answers with an error saying to redo it: the
later write loses, loudly, and nothing is lost silently. Files under `.git` and `.npmrc` stay on
the host that wrote them (programs run what they hold; the file tools never write them either);
symlinks and files with several hard links are not copied; files arrive without execute bits."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from teamctl.shared.agent.tools import Toolbox, ToolFn, capped
from teamctl.shared.agent.workspace import UNWRITABLE_NAMES, Workspace
from teamctl.shared.errors import ToolFailed
from teamctl.shared.text import echoed
from teamctl.shared.workspace_files import SaveVerdict, WorkspaceFiles

log = logging.getLogger(__name__)

TEMP_PREFIX = ".teamctl-write-"
"""Workspace.write's temporary files: never saved (a rename replaces them in a moment)."""
RACY_NS = 100_000_000
"""A file changed less than this before it was synced is compared by content next time, not by
its stat (size, mtime, inode), which a same-size rewrite within one timestamp tick keeps."""
RESULT_IN_ERROR_CHARS = 4000
"""How much of a tool's result an unsaved-change error repeats (bash output, say)."""


class WorkspaceNotSaved(ToolFailed):
    """A tool call changed files that could not be saved back to the shared workspace."""


@dataclass(frozen=True)
class _Synced:
    """What the mirror knows of one path: the version it last had and that content's digest
    (None: no file), and the local file's (size, mtime) when it last matched it."""

    version: int
    digest: str | None
    local: tuple[int, int, int] | None


NONE = _Synced(0, None, None)


class WorkspaceMirror:
    """The files of a Redis-kept workspace in a private local directory."""

    def __init__(self, files: WorkspaceFiles, root: Path) -> None:
        self.files = files
        self.root = root
        self.workspace = Workspace(root)
        self._synced: dict[str, _Synced] = {}
        self._rev = -1
        self.fence_lost = False
        """Set once a save was refused because the claim or turn was lost: nothing more is
        saved (the caller stops on its own check)."""

    @classmethod
    def open(cls, files: WorkspaceFiles) -> WorkspaceMirror:
        """A mirror in a new private temporary directory (TMPDIR), with every file fetched."""
        mirror = cls(files, Path(tempfile.mkdtemp(prefix="teamctl-workspace-")))
        mirror.pull()
        return mirror

    def close(self) -> None:
        """Remove the local copy (everything worth keeping was saved after each tool call)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def pull(self) -> None:
        """Take what others saved since the last pull; a file changed here and not yet saved is
        left alone (its save will be refused and say so)."""
        rev = self.files.rev()
        if rev == self._rev:
            return
        versions = self.files.versions()
        changed = [path for path, version in versions.items()
                   if self._synced.get(path, NONE).version != version and syncable(path)]
        found, deleted = self.files.fetch(changed)
        for path in changed:
            if (path in found or path in deleted) and not self._changed_here(path):
                self._take(path, versions[path], found.get(path))
        if len(found) + len(deleted) == len(changed):  # else a save raced the read: again
            self._rev = rev

    def push(self) -> list[str]:
        """Save what changed here since the last sync; one line per file that was not saved."""
        if self.fence_lost:
            return []
        local = dict(self._local_files())
        tracked = {path for path, synced in self._synced.items() if synced.digest is not None}
        problems: list[str] = []
        for path in sorted(local.keys() | tracked):
            problem = self._push_one(path, local.get(path))
            if problem:
                problems.append(problem)
            if self.fence_lost:
                break
        return problems

    def guard(self, toolbox: Toolbox, names: Iterable[str]) -> None:
        """Wrap the named tools (those that may touch files): pull before each call, push after
        it, and turn unsaved changes into the call's error."""
        for name in names:
            tool = toolbox.get(name)
            if tool is not None:
                toolbox.wrap(name, self._guarded(tool.fn))

    def _guarded(self, fn: ToolFn) -> ToolFn:
        def call(args: Any) -> Any:
            self.pull()
            try:
                result = fn(args)
            except Exception as exc:
                problems = self.push()  # a failed command may still have changed files
                if problems:
                    raise WorkspaceNotSaved(f"{exc}; also, {_joined(problems)}") from exc
                raise
            problems = self.push()
            if problems:
                raise WorkspaceNotSaved(f"the call ran (its result: {_result_text(result)}), "
                                        f"but {_joined(problems)}")
            return result
        return call

    def _push_one(self, path: str, local: tuple[int, int, int] | None) -> str | None:
        synced = self._synced.get(path, NONE)
        if local is not None and local == synced.local:
            return None  # untouched since it was last in sync
        data = self._read_local(path) if local is not None else None
        if _digest(data) == synced.digest:
            self._synced[path] = _Synced(synced.version, synced.digest,
                                         self._trusted_stat(path))
            return None
        outcome = self.files.save(path, synced.version, data)
        shown = echoed(path)
        if outcome.verdict is SaveVerdict.SAVED:
            self._synced[path] = _Synced(outcome.version, _digest(data),
                                         self._trusted_stat(path))
            if outcome.rev == self._rev + 1:  # nobody else saved: the next pull has nothing
                self._rev = outcome.rev
            return None
        if outcome.verdict is SaveVerdict.STALE:
            self.fence_lost = True
            return "this session no longer holds its task or turn: nothing more is saved"
        if outcome.verdict is SaveVerdict.CONFLICT:
            self._take_current(path, outcome.version)
            return (f"{shown} was not saved: another member saved version {outcome.version} "
                    "first, which is now in the workspace; read it and redo your change")
        # Too big: remembered as seen, so it is not retried until it changes again.
        self._synced[path] = _Synced(synced.version, synced.digest, local)
        caps = self.files.caps
        if outcome.verdict is SaveVerdict.FILE_TOO_BIG:
            return (f"{shown} was not saved: it is {len(data or b'')} bytes and a shared file "
                    f"may hold {caps.file_max_bytes} (option workspace_file_max_bytes)")
        return (f"{shown} was not saved: the shared workspace would pass its "
                f"{caps.workspace_max_bytes} bytes (option workspace_max_bytes); delete files "
                "it no longer needs")

    def _take(self, path: str, version: int, data: bytes | None) -> None:
        """Make the local file hold `data` (None: no file), as of `version`."""
        try:
            if data is None:
                self.workspace.remove(path)
            else:
                self.workspace.write_bytes(path, data)
        except ToolFailed as exc:  # e.g. a local symlink or file in the way of its directory
            log.warning("workspace file %s not materialized: %s", echoed(path), exc)
            return
        self._synced[path] = _Synced(version, _digest(data), self._trusted_stat(path))

    def _take_current(self, path: str, version: int) -> None:
        """Replace the local file with the saved one, `version` having been read before its
        content (content newer than its version is taken again by the next pull, harmlessly;
        the reverse would pass a newer version off as an older one's content)."""
        found, deleted = self.files.fetch([path])
        if path in found or path in deleted:
            self._take(path, version, found.get(path))
        else:
            # Raced by yet another save: the next pull takes that one over the local copy.
            self._synced[path] = _Synced(version - 1, _digest(self._read_local(path)), None)
            self._rev = -1

    def _changed_here(self, path: str) -> bool:
        synced = self._synced.get(path, NONE)
        local = self._local_stat(path)
        if local is None or local == synced.local:
            return local is None and synced.digest is not None
        return _digest(self._read_local(path)) != synced.digest

    def _local_files(self) -> Iterator[tuple[str, tuple[int, int, int]]]:
        """Every regular, singly-linked file under the root that is synced, with its stat
        (scandir and plain strings: this runs after every tool call)."""
        folders = [("", str(self.root))]
        while folders:
            prefix, folder = folders.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.name.lower() in UNWRITABLE_NAMES:
                    continue
                path = prefix + entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append((path + "/", entry.path))
                        continue
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (stat.S_ISREG(info.st_mode) and info.st_nlink == 1
                        and not entry.name.startswith(TEMP_PREFIX)):
                    yield path, (info.st_size, info.st_mtime_ns, info.st_ino)

    def _local_stat(self, path: str) -> tuple[int, int, int] | None:
        try:
            info = os.lstat(os.path.join(self.root, path))
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            return None
        return info.st_size, info.st_mtime_ns, info.st_ino

    def _trusted_stat(self, path: str) -> tuple[int, int, int] | None:
        """The stat to remember for a file just synced, or None while its mtime is too recent
        to tell a later change of the same size apart (timestamps have a coarse tick): the
        next push then compares its content instead."""
        local = self._local_stat(path)
        if local is None or time.time_ns() - local[1] < RACY_NS:
            return None
        return local

    def _read_local(self, path: str) -> bytes | None:
        try:
            fd = os.open(self.root / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as file:
            return file.read()


def syncable(path: str) -> bool:
    """Whether a workspace path is copied between hosts: relative, plain components, none named
    like the names the file tools never write."""
    parts = path.split("/")
    return (bool(path) and "\0" not in path and not path.startswith("/")
            and all(part not in ("", ".", "..") and part.lower() not in UNWRITABLE_NAMES
                    for part in parts))


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _joined(problems: list[str]) -> str:
    return "; ".join(problems)


def _result_text(result: object) -> str:
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json", by_alias=True)
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return capped(text, RESULT_IN_ERROR_CHARS)
