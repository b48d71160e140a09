"""Directories and files only their owner can read: the state dir and everything teamctl makes
under it (workspaces, logs, the embedded Redis, the pool's record) hold what models wrote and
what workers logged, which other users of the host must not read."""

from __future__ import annotations

import os
import stat
from contextlib import suppress
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` and each missing parent 0700; an existing `path` of ours that others may
    enter is narrowed to 0700 (an older teamctl made them 0755), one of another user is left."""
    _make_missing(path.parent)
    path.mkdir(mode=DIR_MODE, exist_ok=True)  # a file in the way raises, naming it
    narrow(path)
    return path


def checked_private_dir(path: Path, *, tighten: bool) -> Path:
    """Create `path` as a 0700 dir of ours, or check that it is one; `tighten` narrows the mode
    of our own dir instead of refusing it (the state dir of an older teamctl was 0755)."""
    # Here, not above: `teamctl run` uses this module before it imports pydantic, which the
    # errors need (coordinator/local_workers/early_parent.py).
    from teamctl.shared.errors import InfraError

    _make_missing(path.parent)
    with suppress(FileExistsError):
        path.mkdir(mode=DIR_MODE)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise InfraError(
            f"{path} is not a directory owned by you; remove it or set "
            "TEAMCTL_STATE_DIR to a directory of your own"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        if not tighten:
            raise InfraError(
                f"{path} is open to other users (mode "
                f"{stat.S_IMODE(info.st_mode):o}); remove it so teamctl recreates it"
            )
        path.chmod(DIR_MODE)
    return path


def narrow(path: Path, mode: int = DIR_MODE) -> None:
    """Take away every permission of group and others from `path` when it is ours (a symlink
    is left: chmod would follow it)."""
    with suppress(FileNotFoundError):
        info = path.lstat()
        if (
            info.st_uid == os.getuid()
            and not stat.S_ISLNK(info.st_mode)
            and stat.S_IMODE(info.st_mode) & 0o077
        ):
            path.chmod(stat.S_IMODE(info.st_mode) & mode)


def private_opener(path: str | os.PathLike[str], flags: int) -> int:
    """An `open(..., opener=)` that creates the file 0600 and narrows an existing one of ours
    to 0600; it never follows a symlink in the last component."""
    fd = os.open(path, flags | os.O_NOFOLLOW, FILE_MODE)
    info = os.fstat(fd)
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & FILE_MODE)
    return fd


def write_private(path: Path, text: str) -> None:
    """Write a 0600 file, never readable by others even for a moment, replaced atomically."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(partial, path)


def _make_missing(path: Path) -> None:
    """mkdir -p with mode 0700 for each directory it creates (existing ones are not touched)."""
    missing = []
    for directory in (path, *path.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        with suppress(FileExistsError):  # another command made it in the meantime
            directory.mkdir(mode=DIR_MODE)
