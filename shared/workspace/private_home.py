"""The private HOME of `bash` and stdio MCP servers: a fresh 0700 directory outside the workspace
(programs read their configuration there, so it must not be a file a member wrote).

Its process holds it (a shared flock on the directory) until it removes it, so a home whose
process was killed first can be told from one in use: a worker removes those, since what a
program saved in its HOME (caches, credentials a tool wrote) must not outlive the attempt. The
lock and the removal are held_dirs.py's.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from teamctl.shared.errors import ConfigError
from teamctl.shared.workspace.held_dirs import OPEN_FLAGS, remove_tree, remove_unheld

log = logging.getLogger(__name__)
HOME_PREFIX = "teamctl-private-home-"
"""Not the prefix of the homes older workers made and never held (teamctl-home-): during a
rolling upgrade on one host, the sweep must not take one of those, in use, for an orphan."""
ORPHAN_MIN_AGE_S = 60.0
"""A home younger than this is never swept: its process locks it a moment after making it."""


class PrivateHome:
    """One process's private HOME, held until `remove`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def create(cls, workspace: Path) -> PrivateHome:
        """A fresh 0700 directory in the temporary directory, outside `workspace`, held."""
        path = Path(tempfile.mkdtemp(prefix=HOME_PREFIX)).resolve()
        if path.is_relative_to(workspace.resolve()):
            os.rmdir(path)
            raise ConfigError(
                f"the temporary directory ({tempfile.gettempdir()}) is inside the "
                "workspace; set the workers' TMPDIR elsewhere"
            )
        fd = os.open(path, OPEN_FLAGS)  # not inherited: a child must not keep it held
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            os.close(fd)
            os.rmdir(path)
            raise
        return cls(path, fd)

    def remove(self) -> None:
        """Remove the home and what was written in it, whatever modes a program left on its
        directories (a module cache's read-only ones), then let it go; a link a program put in
        its place is removed, never followed. Never raises."""
        if self._fd is None:
            return
        try:
            remove_tree(self.path)
        finally:
            os.close(self._fd)
            self._fd = None


@contextmanager
def private_home(workspace: Path) -> Iterator[Path]:
    """A PrivateHome for the block, removed when it ends."""
    home = PrivateHome.create(workspace)
    try:
        yield home.path
    finally:
        home.remove()


def remove_orphan_homes(temp_dir: Path, min_age_s: float = ORPHAN_MIN_AGE_S) -> list[Path]:
    """Remove the private homes in `temp_dir` that no process holds (theirs was killed): this
    user's directories, unchanged for `min_age_s`, and the links a program put in place of one
    (removed, never followed). The ones removed."""
    try:
        entries = [e for e in os.scandir(temp_dir) if e.name.startswith(HOME_PREFIX)]
    except OSError as exc:
        log.warning("could not look for orphan homes in %s: %s", temp_dir, exc)
        return []
    removed: list[Path] = []
    oldest_mtime = time.time() - min_age_s
    for entry in entries:
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            orphan_shaped = (
                (stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode))
                and info.st_uid == os.getuid()
                and info.st_mtime <= oldest_mtime
            )
            if orphan_shaped and remove_unheld(Path(entry.path)):
                removed.append(Path(entry.path))
    return removed
