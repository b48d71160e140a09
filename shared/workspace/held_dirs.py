"""Directories a process holds (a shared flock) while tools write in them, and their removal
whatever a tool left there: the kept workspace copies (kept_copy.py) and the private homes of
`bash` and MCP servers (private_home.py).

Whoever removes one that may be held takes the lock exclusively without waiting, or leaves it
for later (remove_unheld). Removal opens up the directories a tool made unreadable or read-only,
and never follows a link, the root included: a link or a file in a directory's place is
unlinked. Nothing here raises for what a tool did to the files.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)
OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
"""How a held directory is opened: never through a link (a directory swapped for one)."""


def remove_unheld(root: Path) -> bool:
    """Remove `root` unless its holder (a mirror, a private home's process) holds it; False
    when one does, or when it could not be removed now (try again later)."""
    try:
        fd = _open_unfollowed(root)
    except FileNotFoundError:
        return True
    except OSError as exc:
        with contextlib.suppress(OSError):
            if not _is_directory(root):
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
        if _is_directory(root):
            empty_directory(root)
            os.rmdir(root)
        else:
            os.unlink(root)
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
        if not _is_directory(root):  # a link in its place: never followed
            return False
    except FileNotFoundError:
        return True
    except OSError:
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


def _is_directory(path: Path) -> bool:
    """Whether `path` itself (never what a link there names) is a directory."""
    return stat.S_ISDIR(os.lstat(path).st_mode)
