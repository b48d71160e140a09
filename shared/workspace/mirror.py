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
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

from pydantic import BaseModel
from teamctl.shared.agent.tools import Toolbox, ToolFn, capped
from teamctl.shared.errors import ToolFailed
from teamctl.shared.text import echoed, flat
from teamctl.shared.workspace import kept_copy
from teamctl.shared.workspace.caps import PATH_RECORD_BYTES
from teamctl.shared.workspace.directory import UNWRITABLE_NAMES, Workspace
from teamctl.shared.workspace.held_dirs import remove_tree
from teamctl.shared.workspace.redis_files import SaveOutcome, SaveVerdict, WorkspaceFiles

log = logging.getLogger(__name__)

TEMP_PREFIX = ".teamctl-write-"
"""Workspace.write's temporary files: never saved (a rename replaces them in a moment)."""
RACY_NS = 100_000_000
"""A file changed less than this before it was synced is compared by content next time, not by
its stat (size, mtime, inode), which a same-size rewrite within one timestamp tick keeps."""
RESULT_IN_ERROR_CHARS = 4000
"""How much of a tool's result an unsaved-change error repeats (bash output, say)."""
PROBLEMS_SHOWN = 20
"""Files an unsaved-change error names one by one; the rest are counted."""


class WorkspaceNotSaved(ToolFailed):
    """A tool call changed files that could not be saved back to the shared workspace."""


Stat = tuple[int, int, int]
"""A local file's size, mtime (ns) and inode: unchanged, its content is taken as unchanged."""


@dataclass(frozen=True)
class _Synced:
    """What the mirror knows of one path: the version it last had and that content's digest
    (None: no file), and the local file's Stat when it last matched it (None: not trusted)."""

    version: int
    digest: str | None
    local: Stat | None


NONE = _Synced(0, None, None)


class WorkspaceMirror:
    """The files of a Redis-kept workspace in a private local directory."""

    def __init__(self, files: WorkspaceFiles, root: Path, *, held: int | None = None) -> None:
        self.files = files
        self.root = root
        self.held = held
        """The kept root's descriptor while this mirror holds it (shared/workspace/kept_copy.py):
        the root outlives the mirror, which empties it as it closes."""
        self.workspace = Workspace(root)
        self._synced: dict[str, _Synced] = {}
        self._reported: dict[str, tuple[str, tuple[int, int, int] | None]] = {}
        """What was last said about a file that could not be saved, for the file as it was."""
        self._rev = -1
        self._files_full = False
        """Set once this push was refused a new file for the workspace's file count."""
        self.fence_lost = False
        """Set once a save was refused because the claim or turn was lost: nothing more is
        saved (the caller stops on its own check)."""

    @classmethod
    def open(cls, files: WorkspaceFiles, kept_root: Path | None = None) -> WorkspaceMirror:
        """A mirror with every file fetched, in a new private temporary directory (TMPDIR), or
        in `kept_root`, a private directory that outlives it (so warm MCP servers can keep
        working there), emptied first: each mirror starts from the shared files alone. One that
        cannot be used (logged) gives way to a temporary directory."""
        held = kept_copy.hold(kept_root) if kept_root is not None else None
        if kept_root is not None and held is not None:
            mirror = cls(files, kept_root, held=held)
        else:
            mirror = cls(files, Path(tempfile.mkdtemp(prefix="teamctl-workspace-")))
        try:
            mirror.pull()
        except BaseException:
            mirror.close()
            raise
        return mirror

    def close(self) -> None:
        """Remove the local copy (everything worth keeping was saved after each tool call, and
        by a last push before the outcome), a kept root's content only, and the client it
        used."""
        try:
            if self.held is not None:
                kept_copy.release(self.held, self.root)
            else:
                remove_tree(self.root)
        finally:
            self.held = None
            self.files.close()

    @property
    def kept(self) -> bool:
        """Whether the copy is in a directory that outlives this mirror."""
        return self.held is not None

    def pull(self) -> None:
        """Take what others saved since the last pull; a file changed here and not yet saved is
        left alone (its save will be refused and say so)."""
        rev = self.files.rev()
        if rev == self._rev:
            return
        versions = self.files.versions()
        changed = [
            path
            for path, version in versions.items()
            if self._synced.get(path, NONE).version != version and syncable(path)
        ]
        # A file this copy holds whose record is gone was deleted, its record dropped since.
        vanished = [
            path
            for path, synced in self._synced.items()
            if synced.digest is not None and path not in versions
        ]
        found, deleted = self.files.fetch(changed + vanished)
        for path in changed:
            if (path in found or path in deleted) and not self._changed_here(path):
                self._take(path, versions[path], found.get(path))
        for path in vanished:
            if path in deleted and not self._changed_here(path):
                self._take(path, 0, None)
        settled = len(found) + len(deleted) == len(changed) + len(vanished)
        if settled and not any(path in found for path in vanished):  # else a save raced: again
            self._rev = rev

    def push(self) -> list[str]:
        """Save what changed here since the last sync; one line per file that was not saved."""
        if self.fence_lost:
            return []
        local = dict(self._local_files())
        tracked = {path for path, synced in self._synced.items() if synced.digest is not None}
        problems: list[str] = []
        unsent = 0
        for path in sorted(local.keys() | tracked):
            synced = self._synced.get(path, NONE)
            if self._files_full and path not in tracked and local[path] != synced.local:
                # Refused as the one before it was, without a round trip each (a loop of `touch`
                # may have made a million); tried again once it changes.
                self._synced[path] = _Synced(synced.version, None, local[path])
                unsent += 1
                continue
            problem = self._push_one(path, local.get(path))
            if problem:
                problems.append(problem)
            if self.fence_lost:
                break
        if unsent:
            problems.append(f"{unsent} more new file(s) were not saved: {self._files_cap()}")
        self._files_full = False
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
                raise WorkspaceNotSaved(
                    f"the call ran (its result: {_result_text(result)}), but {_joined(problems)}"
                )
            return result

        return call

    def _push_one(self, path: str, local: Stat | None) -> str | None:
        """Save one path if it changed here; what went wrong, in a line, if it was not saved."""
        synced = self._synced.get(path, NONE)
        if local is not None and local == synced.local:
            return None  # untouched since it was last in sync
        unsaved = self._unsaveable(path, local)
        if unsaved is not None:  # left alone here and there; said once per state of the file
            return self._once(path, unsaved)
        data = None if local is None else self._read_local(path)
        if local is not None and data is None:
            return self._once(path, "it cannot be read here")
        if _digest(data) == synced.digest:
            self._synced[path] = _Synced(synced.version, synced.digest, self._trust(path, local))
            return None
        # A copy that saw no file there says so (0): it may create one while there is none.
        seen = synced.version if synced.digest is not None else 0
        outcome = self.files.save(path, seen, data)
        return self._settle(path, synced, local, data, outcome)

    def _unsaveable(self, path: str, local: Stat | None) -> str | None:
        """Why the path's change is not to be saved (None: save it). Only a file really gone is
        deleted from the workspace: one unreadable here, or turned into a link, is left alone
        there."""
        if local is None:
            return self._why_unlisted(path)
        if local[0] > self.files.caps.file_max_bytes:
            return self._too_big(local[0])
        return None

    def _settle(
        self,
        path: str,
        synced: _Synced,
        local: Stat | None,
        data: bytes | None,
        outcome: SaveOutcome,
    ) -> str | None:
        """Record what a save did; the line to report when it did not save."""
        shown = flat(echoed(path))
        match outcome.verdict:
            case SaveVerdict.SAVED:
                self._synced[path] = _Synced(
                    outcome.version, _digest(data), self._trust(path, local)
                )
                if outcome.rev == self._rev + 1:  # nobody else saved: the pull has nothing
                    self._rev = outcome.rev
                return None
            case SaveVerdict.STALE:
                self.fence_lost = True
                return "this session no longer holds its task or turn: nothing more is saved"
            case SaveVerdict.CONFLICT:
                taken = self._take_current(path, outcome.version)
                where = (
                    "which is now in the workspace"
                    if taken
                    else "which could not be put here (something local is in its way)"
                )
                return (
                    f"{shown} was not saved: another member saved version "
                    f"{outcome.version} first, {where}; read it and redo your change"
                )
            case SaveVerdict.EXPIRED:
                return f"{shown} was not saved: its upload expired; it is tried again next time"
            case SaveVerdict.FILE_TOO_BIG:
                problem = self._too_big(len(data or b""))
            case SaveVerdict.TOO_MANY_FILES:
                self._files_full = True
                problem = self._files_cap()
            case SaveVerdict.WORKSPACE_FULL:
                limit = self.files.caps.workspace_max_bytes
                problem = (
                    f"the shared workspace would pass its {limit} bytes (option "
                    "workspace_max_bytes; a file counts its content, twice its path and "
                    f"{PATH_RECORD_BYTES} bytes); delete files it no longer needs"
                )
            case _:
                assert_never(outcome.verdict)
        # Remembered as seen: not tried again until it changes again.
        self._synced[path] = _Synced(synced.version, synced.digest, local)
        return f"{shown} was not saved: {problem}"

    def _files_cap(self) -> str:
        return (
            f"the shared workspace holds {self.files.caps.workspace_max_files} files, its "
            "limit (option workspace_max_files); delete files it no longer needs"
        )

    def _too_big(self, size_bytes: int) -> str:
        return (
            f"it is {size_bytes} bytes and a shared file may hold "
            f"{self.files.caps.file_max_bytes} (option workspace_file_max_bytes)"
        )

    def _once(self, path: str, why: str) -> str | None:
        """`why` as a problem line, unless it was said already for the file as it is now."""
        state = (why, self._lstat_key(path))
        if self._reported.get(path) == state:
            return None
        self._reported[path] = state
        return f"{flat(echoed(path))} was not saved: {why}"

    def _why_unlisted(self, path: str) -> str | None:
        """Why a tracked file the walk did not list is not to be deleted (None: it is gone)."""
        try:
            info = os.lstat(os.path.join(self.root, path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return f"it cannot be read here ({exc.strerror or type(exc).__name__})"
        if stat.S_ISDIR(info.st_mode):
            return None  # a directory now: the file is gone, what it holds is saved apart
        if stat.S_ISLNK(info.st_mode):
            return "it is a symlink now, and symlinks are not copied between hosts"
        if stat.S_ISREG(info.st_mode):
            return (
                f"it has {info.st_nlink} hard links, and a hard-linked file is not copied "
                "between hosts"
            )
        return "it is not a regular file now"

    def _lstat_key(self, path: str) -> tuple[int, int, int] | None:
        try:
            info = os.lstat(os.path.join(self.root, path))
        except OSError:
            return None
        return info.st_mode, info.st_mtime_ns, info.st_ino

    def _trust(self, path: str, before: Stat | None) -> Stat | None:
        """The stat taken before a file was read, to compare later ones with, if it still holds
        after the save and is not too recent to tell a same-size rewrite apart (timestamps have
        a coarse tick); else None, and the next push compares content instead."""
        if before is None or time.time_ns() - before[1] < RACY_NS:
            return None
        return before if self._local_stat(path) == before else None

    def _take(self, path: str, version: int, data: bytes | None) -> bool:
        """Make the local file hold `data` (None: no file), as of `version`; False when it
        cannot be put here (the version is then recorded as absent here)."""
        try:
            if data is None:
                self.workspace.remove(path)
            else:
                self.workspace.write_bytes(path, data)
        except ToolFailed as exc:  # e.g. a local symlink or file in the way of its directory
            log.warning("workspace file %r not materialized: %s", echoed(path), exc)
            self._synced[path] = _Synced(version, None, None)
            return False
        written = self._local_stat(path)
        self._synced[path] = _Synced(version, _digest(data), self._trust(path, written))
        return True

    def _take_current(self, path: str, version: int) -> bool:
        """Replace the local file with the saved one, `version` having been read before its
        content (content newer than its version is taken again by the next pull, harmlessly;
        the reverse would pass a newer version off as an older one's content)."""
        found, deleted = self.files.fetch([path])
        if path in found or path in deleted:
            return self._take(path, version, found.get(path))
        # Raced by yet another save: the next pull takes that one over the local copy.
        self._synced[path] = _Synced(version - 1, _digest(self._read_local(path)), None)
        self._rev = -1
        return True

    def _changed_here(self, path: str) -> bool:
        synced = self._synced.get(path, NONE)
        local = self._local_stat(path)
        if local is None or local == synced.local:
            return local is None and synced.digest is not None
        return _digest(self._read_local(path)) != synced.digest

    def _local_files(self) -> Iterator[tuple[str, Stat]]:
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
                if (
                    stat.S_ISREG(info.st_mode)
                    and info.st_nlink == 1
                    and not entry.name.startswith(TEMP_PREFIX)
                ):
                    yield path, (info.st_size, info.st_mtime_ns, info.st_ino)

    def _local_stat(self, path: str) -> Stat | None:
        try:
            info = os.lstat(os.path.join(self.root, path))
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            return None
        return info.st_size, info.st_mtime_ns, info.st_ino

    def _read_local(self, path: str) -> bytes | None:
        try:
            return self.workspace.read_bytes(path)
        except ToolFailed:
            return None


def syncable(path: str) -> bool:
    """Whether a workspace path is copied between hosts: relative, plain components, none named
    like the names the file tools never write."""
    parts = path.split("/")
    return (
        bool(path)
        and "\0" not in path
        and not path.startswith("/")
        and all(
            part not in ("", ".", "..") and part.lower() not in UNWRITABLE_NAMES for part in parts
        )
    )


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _joined(problems: list[str]) -> str:
    """The problems in one line, the first PROBLEMS_SHOWN of them."""
    shown = "; ".join(problems[:PROBLEMS_SHOWN])
    left = len(problems) - PROBLEMS_SHOWN
    return shown + (f"; and {left} more file(s) were not saved" if left > 0 else "")


def _result_text(result: object) -> str:
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json", by_alias=True)
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return capped(text, RESULT_IN_ERROR_CHARS)
