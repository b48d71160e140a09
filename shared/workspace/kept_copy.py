"""A directory a worker keeps for the copies of one run's (team's) workspace kept in Redis, so the
MCP servers started there can stay warm for its next attempts (worker/mcp_warm).

A mirror holds it (a shared flock on the directory) from the moment it empties it to the moment
it empties it again as it closes, so the keeper, which removes it once no warm session works
there, never removes it under a live attempt: it takes the lock exclusively, without waiting,
or tries again later. Emptying is checked: anything left (a directory a tool made unreadable or
read-only, a file a background process wrote meanwhile) would be saved by the next attempt as
its own change, so a directory that cannot be emptied is not used. The directory itself must be
a real directory of ours, never a link. Nothing here raises for what a tool did to the files:
the attempt's outcome must not be lost to its clean-up.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from pathlib import Path

from teamctl.shared.process.private_files import DIR_MODE, private_dir

log = logging.getLogger(__name__)
OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
"""How a held directory is opened: never through a link (a directory swapped for one)."""


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


def remove_unheld(root: Path) -> bool:
    """Remove `root` unless its holder (a mirror, a private home's process) holds it; False
    when one does, or when it could not be removed now (try again later)."""
    try:
        fd = _open_unfollowed(root)
    except FileNotFoundError:
        return True
    except OSError as exc:
        with contextlib.suppress(OSError):
            if _is_directory(root) is False:
                log.warning("%s is not a directory (%s); removing the entry", root, exc)
                return remove_tree(root)  # a link or a file: removed, never followed
        # Not ours, or no descriptor to spare now: never taken for unheld.
        log.warning("could not open %s: %s", root, exc)
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (BlockingIOError), or it cannot be locked now
        os.close(fd)
        return False
    try:
        return remove_tree(root)
    finally:
        os.close(fd)


def remove_tree(root: Path) -> bool:
    """Remove `root` and all it holds, whatever modes a tool left on its directories; a link
    or a file in its place is removed, never followed. Whether it is gone (what cannot be
    removed is logged)."""
    try:
        root_is_directory = _is_directory(root)
        if root_is_directory is None:
            return True
        if not root_is_directory:
            os.unlink(root)
            return True
        empty_directory(root)
        os.rmdir(root)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("could not remove %s: %s", root, exc)
        return False
    return True


def empty_directory(root: Path) -> bool:
    """Remove everything in `root` but `root` itself (a process working there keeps its
    directory): directories a tool made unreadable or read-only are opened up first; links are
    removed, never followed. Whether it is empty now (True too when `root` is gone). A loop,
    not recursion: a tool may nest directories deeper than Python's recursion limit."""
    try:
        root_is_directory = _is_directory(root)
    except OSError:
        return False
    if root_is_directory is None:
        return True
    if not root_is_directory:  # a link in its place: never followed
        return False
    found: list[str] = []
    pending = [str(root)]
    while pending:
        directory = pending.pop()
        _owner_may_enter(directory)
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("could not list %s: %s", directory, exc)
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
                found.append(entry.path)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
    for directory in reversed(found):  # found after its parent: removed before it
        with contextlib.suppress(OSError):
            os.rmdir(directory)
    try:
        return not any(os.scandir(root))
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _owner_may_enter(directory: str) -> None:
    """Give the owner read, write and search on `directory` (never through a link)."""
    with contextlib.suppress(OSError):
        info = os.lstat(directory)
        if stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) & stat.S_IRWXU != stat.S_IRWXU:
            os.chmod(directory, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)


def _open_unfollowed(root: Path) -> int:
    """A descriptor of the directory `root`, never through a link; its owner gets back the
    right to read it first if a tool took it away (`chmod u-r`)."""
    try:
        return os.open(root, OPEN_FLAGS)
    except PermissionError:
        _owner_may_enter(str(root))
        return os.open(root, OPEN_FLAGS)


def _is_directory(path: Path) -> bool | None:
    """Whether `path` itself (never what a link there names) is a directory; None when nothing
    is there."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


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
