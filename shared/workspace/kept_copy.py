"""A directory a worker keeps for the copies of one run's (team's) workspace kept in Redis, so the
MCP servers started there can stay warm for its next attempts (worker/mcp_warm).

A mirror holds it (a shared flock on the directory) from the moment it empties it to the moment
it empties it again as it closes, so the keeper, which removes it once no warm session works
there, never removes it under a live attempt: it takes the lock exclusively, without waiting,
or tries again later. Emptying is checked: anything left (a directory a tool made unreadable or
read-only, a file a background process wrote meanwhile) would be saved by the next attempt as
its own change, so a directory that cannot be emptied is not used. The directory itself must be
a real directory of ours, never a link. Nothing here raises for what a tool did to the files:
the attempt's outcome must not be lost to its clean-up. The keeper removes it with
held_dirs.remove_unheld.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from teamctl.shared.process.private_files import DIR_MODE, private_dir
from teamctl.shared.workspace.held_dirs import OPEN_FLAGS, empty_directory

log = logging.getLogger(__name__)


def hold(root: Path) -> int | None:
    """Create `root` 0700 if missing, hold it and empty it: its descriptor, to give to
    `release`; None (logged) when it is not a directory of ours or cannot be emptied."""
    try:
        private_dir(root)
        fd = os.open(root, OPEN_FLAGS)
    except OSError as exc:
        log.warning("workspace copy %s not used: %s", root, exc)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        # Checked once the lock is ours: the keeper may have removed it while we waited.
        if not _is_ours_and_there(fd, root):
            raise OSError(f"{root} is not a directory of ours, or was just removed")
        os.fchmod(fd, DIR_MODE)  # a tool may have made it read-only
        if not empty_directory(root):
            raise OSError(f"{root} could not be emptied")
    except OSError as exc:
        os.close(fd)
        log.warning("workspace copy %s not used: %s", root, exc)
        return None
    return fd


def release(fd: int, root: Path) -> None:
    """Empty the held `root` (it may be gone) and let it go; what cannot be removed is logged
    (the next attempt checks again)."""
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, DIR_MODE)
        if not empty_directory(root):
            log.warning("workspace copy %s not emptied; the next attempt will check it", root)
    finally:
        os.close(fd)  # the lock goes with it


def _is_ours_and_there(fd: int, root: Path) -> bool:
    """Whether the held descriptor is a directory of ours still at `root`."""
    held = os.fstat(fd)
    try:
        there = os.lstat(root)
    except OSError:
        return False
    return (
        held.st_uid == os.getuid()
        and held.st_nlink > 0
        and (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)
    )
