"""A directory a worker keeps for the copies of one run's (team's) workspace kept in Redis, so the
MCP servers started there can stay warm for its next attempts (worker/mcp_warm).

A mirror holds it (a shared flock on the directory) from the moment it empties it to the moment
it empties it again as it closes, so the keeper, which removes it when the run ends, never
removes it under a live attempt: it takes the lock exclusively, without waiting, or tries again
later. Emptying is checked: anything left (a read-only subdirectory, a file a background process
wrote meanwhile) would be saved by the next attempt as its own change, so a directory that cannot
be emptied is not used. The directory itself must be a real directory of ours, never a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teamctl.shared.process.private_files import private_dir

log = logging.getLogger(__name__)


def hold(root: Path) -> int | None:
    """Create `root` 0700 if missing, hold it and empty it: its descriptor, to give to
    `release`; None (logged) when it is not a directory of ours or cannot be emptied."""
    try:
        private_dir(root)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        log.warning("workspace copy %s not used: %s", root, exc)
        return None
    try:
        if os.fstat(fd).st_uid != os.getuid():
            raise OSError(f"{root} is not ours")
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not empty_directory(root):
            raise OSError(f"{root} could not be emptied")
    except OSError as exc:
        os.close(fd)
        log.warning("workspace copy %s not used: %s", root, exc)
        return None
    return fd


def release(fd: int, root: Path) -> None:
    """Empty the held `root` (it may be gone) and let it go."""
    try:
        empty_directory(root)
    finally:
        os.close(fd)  # the lock goes with it


def remove_unheld(root: Path) -> bool:
    """Remove `root` unless a mirror holds it; False when one does (try again later)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError as exc:  # a link or a file there: removed, never followed
        log.warning("workspace copy %s is not a directory (%s); removing the entry", root, exc)
        with contextlib.suppress(OSError):
            os.unlink(root)
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        shutil.rmtree(root, onerror=_writable_then_retry)
    finally:
        os.close(fd)
    return True


def empty_directory(root: Path) -> bool:
    """Remove everything in `root` but `root` itself (a process working there keeps its
    directory), making read-only subdirectories writable to do so; links are removed, never
    followed. Whether it is empty now (True too when `root` is gone)."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return True
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=_writable_then_retry)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    try:
        return not any(os.scandir(root))
    except FileNotFoundError:
        return True


def _writable_then_retry(func: Callable[..., Any], path: str, _exc: object) -> None:
    """rmtree's error handler: a directory without write permission (a module cache makes
    them 0555) is made writable, with the one it is in, and the removal tried once more."""
    with contextlib.suppress(OSError):
        for directory in (os.path.dirname(path), path):
            info = os.lstat(directory)
            if stat.S_ISDIR(info.st_mode):
                os.chmod(directory, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
        func(path)
