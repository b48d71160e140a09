"""A run's workspace files as people read them (`teamctl files`, `teamctl export`), wherever
they live: the run's directory on the coordinator's host, or Redis."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import redis
from teamctl.shared.errors import ConfigError, ToolFailed
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.text import flat
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.mirror import syncable
from teamctl.shared.workspace.redis_files import PAGE_FILES, FileEntry, WorkspaceFiles


class RunFiles:
    """The files of one run's workspace; a local one's version is 0 (it keeps none)."""

    def __init__(self, conn: redis.Redis, spec: RunSpec) -> None:
        self.spec = spec
        self.files = (
            WorkspaceFiles(conn, RunKeys(spec.run_id)) if spec.workspace_store == "redis" else None
        )

    @property
    def where(self) -> str:
        """Where the files are, for people."""
        if self.files is not None:
            return f"Redis (keys {self.files.keys.files})"
        return f"{self.spec.workspace_dir} on {self._host}"

    @property
    def here(self) -> bool:
        """Whether this host can read the files (a local workspace is on one host only)."""
        return self.files is not None or Path(self.spec.workspace_dir).is_dir()

    def listing(self) -> list[FileEntry]:
        """Every file, by path."""
        if self.files is not None:
            return self.files.listing()
        return [FileEntry(path, size, 0) for path, size in sorted(self._local_files())]

    def read(self, path: str) -> bytes:
        """One file's content; ConfigError naming how to list them when there is none."""
        missing = ConfigError(
            f"run {self.spec.run_id} has no file {flat(path)!r} in its "
            f"workspace; `teamctl files {self.spec.run_id}` lists them"
        )
        if not syncable(path):
            raise missing
        if self.files is not None:
            found = self.files.contents([path]).get(path)
            if found is None:
                raise missing
            return found
        data = self._read_local(path)
        if data is None:
            raise missing
        return data

    def everything(self) -> Iterator[tuple[str, bytes]]:
        """Every file with its content, a page at a time; only paths `read` would take."""
        paths = [entry.path for entry in self.listing() if syncable(entry.path)]
        for at in range(0, len(paths), PAGE_FILES):
            page = paths[at : at + PAGE_FILES]
            if self.files is not None:
                yield from self.files.contents(page).items()
                continue
            for path in page:
                data = self._read_local(path)
                if data is not None:
                    yield path, data

    def _root(self) -> Path:
        root = Path(self.spec.workspace_dir)
        if not root.is_dir():
            raise ConfigError(
                f"run {self.spec.run_id}'s workspace is a directory on "
                f"{self._host} ({root}), not found here; run this there, or keep "
                "workspaces in Redis (TEAMCTL_WORKSPACE_STORE=redis)"
            )
        return root

    @property
    def _host(self) -> str:
        """The host that holds a local workspace, as people read it."""
        host = self.spec.workspace_host
        return f"host {host}" if host else "the host that created the run"

    def _local_files(self) -> Iterator[tuple[str, int]]:
        """Regular files under the run's directory (symlinks are not followed)."""
        root = self._root()
        for folder, _dirs, names in os.walk(root):
            for name in names:
                full = Path(folder) / name
                info = os.lstat(full)
                path = full.relative_to(root).as_posix()
                if stat.S_ISREG(info.st_mode) and syncable(path):  # as `read` would take it
                    yield path, info.st_size

    def _read_local(self, path: str) -> bytes | None:
        try:
            return Workspace(self._root()).read_bytes(path)
        except ToolFailed:  # gone, or a link out of the workspace: not a file of the run's
            return None
