"""A run's workspace directory: every path a member names must resolve inside it.

Confinement is by resolved path: absolute paths, `..` and symlinks are all resolved first, and
anything that ends up outside the root is refused with ToolFailed (a tool error for the model).
The resolved path is then opened one component at a time from a descriptor of the root, never
following a symlink, so a directory swapped for a symlink after the check (another member's
`bash` can do that) is refused instead of followed out of the workspace.
Hard-linked files are refused for reading and editing (a hard link can name an inode outside the
root), and writes replace the directory entry instead of writing through an existing inode.
`bash` is NOT confined this way (a shell can `cd /`); it only starts in the workspace, with a
minimal environment (no worker secrets), which is why it is off unless a member enables it.
That environment (stdio MCP servers get it too) keeps programs from running what a member wrote
as their configuration: HOME is a private directory outside the workspace, and git takes no
command from a repository's config (environment overrides, which outrank it). The file tools
never write `.git` (hooks and config) nor `.npmrc` (npm's project config).
"""

from __future__ import annotations

import codecs
import math
import os
import resource
import secrets
import selectors
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

from teamctl.shared.errors import ToolFailed
from teamctl.shared.text import echoed
from teamctl.shared.workspace.private_home import private_home

READ_LIMIT_CHARS = 64_000
EDIT_LIMIT_BYTES = 2_000_000
LIST_LIMIT_ENTRIES = 500
BASH_TIMEOUT_S = 60.0
BASH_OUTPUT_LIMIT_CHARS = 16_000
# A fixed PATH: the worker's own PATH may point into its virtualenv or other private places.
BASH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASH_POLL_S = 0.05  # how often a silent command is checked for having exited
BASH_DRAIN_S = 0.25  # after bash exits, how long output already on its way may still be read
BASH_KILL_WAIT_S = 5.0  # a SIGKILLed bash is reaped at once; this only bounds the wait
# Limits of every process a bash command starts (setrlimit, soft and hard). Address space: 4 GiB,
# not 2: runtimes reserve address space they never touch (a JVM's heap, V8's), and a RAM hog
# is stopped either way. Processes: RLIMIT_NPROC counts every process and thread of the user,
# the worker's own and other commands' included, so a fixed number would refuse forks on a busy
# host; the limit is this many above the user's count when the command starts. The kernel does
# not apply it to root: run workers as a user of their own (the Dockerfile does).
BASH_ADDRESS_SPACE_BYTES = 4 << 30
BASH_FILE_SIZE_BYTES = 1 << 30
BASH_MORE_PROCESSES = 256
# bash -c runs this, then the command in a fresh bash with the limits it set ($1: the command).
BASH_LIMITED = (
    'ulimit -t {cpu_s} -v {address_space_kib} -f {file_size_kib}{processes} && exec bash -c "$1"'
)
PROC_ROOT = Path("/proc")
# Git settings that run a command, set where they outrank a repository's own config (the
# environment's, as `git -c`): a workspace's `.git/config` is written by whoever can write the
# workspace, and git runs these in the process that runs git (with an MCP server's secrets).
# Not covered: `diff.external` (an empty value makes `git diff` fail: "cannot run"), and
# per-name keys (`filter.<driver>.*`, `diff.<driver>.command`, `remote.<name>.uploadpack`);
# the file tools never write `.git`, where they live.
GIT_OVERRIDES = (
    ("core.fsmonitor", "false"),  # `git status` runs it
    ("core.hooksPath", "/dev/null"),  # no hook, from .git/hooks or anywhere
    ("core.pager", "cat"),
    ("core.editor", "true"),  # nobody is there to edit: a commit without -m is aborted
    ("sequence.editor", "true"),
    ("core.sshCommand", "ssh"),
    ("core.askPass", ""),
    ("credential.helper", ""),  # empty resets the list of helpers
    ("safe.bareRepository", "explicit"),  # files at the root (HEAD, config, objects/, refs/)
    # would otherwise make the workspace a bare repository
)
# Names the file tools never write, in any component (case-insensitive): git runs hooks and
# commands from `.git` (a directory, or a file pointing to one), npm and npx read a project's
# `.npmrc` from their working directory, and its `node-options` runs code.
UNWRITABLE_NAMES = {
    ".git": "git runs hooks and commands named in a repository's .git (its config, its hooks)",
    ".npmrc": "npm and npx read a project's .npmrc, and settings such as node-options run code",
}
READ_CHUNK_BYTES = 65_536
UTF8_MAX_BYTES_PER_CHAR = 4
NEW_FILE_MODE = 0o644
# What write_file and edit_file never leave on a file they wrote: execute bits (any), and
# setuid, setgid and sticky.
NOT_WRITTEN_MODE_BITS = 0o7111
# O_DIRECTORY also keeps a FIFO swapped in for a directory from blocking the open.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@dataclass(frozen=True)
class Workspace:
    """File operations confined to `root`."""

    root: Path

    @cached_property
    def real_root(self) -> Path:
        """The root with symlinks resolved, computed once (every confinement check uses it)."""
        return self.root.resolve()

    def resolve(self, raw_path: str) -> Path:
        """The real path of `raw_path` (relative to the root), refused if it leaves the root."""
        if not raw_path or not raw_path.strip():
            raise ToolFailed("path is required")
        root = self.real_root
        try:
            candidate = Path(raw_path.strip())
            target = (candidate if candidate.is_absolute() else root / candidate).resolve()
        except (ValueError, OSError, RuntimeError):
            # NUL bytes, symlink loops, over-long names: the exception text holds host paths.
            raise ToolFailed(
                f"invalid path: {echoed(raw_path)!r}; use a plain path relative "
                "to the workspace root"
            ) from None
        if target != root and not target.is_relative_to(root):
            raise ToolFailed(
                f"path {echoed(raw_path)!r} is outside the workspace; use a path "
                "relative to the workspace root"
            )
        return target

    def _parts(self, raw_path: str) -> tuple[str, ...]:
        """The components of the resolved path below the root (none for the root itself)."""
        return self.resolve(raw_path).relative_to(self.real_root).parts

    def _open_dir(self, parts: tuple[str, ...], create: bool = False) -> int:
        """A descriptor of the directory root/parts, opened without following any symlink.

        With `create`, missing directories are made on the way (write_file makes parents)."""
        fd = os.open(self.real_root, DIR_FLAGS)
        try:
            for name in parts:
                if create:
                    with suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                child_fd = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child_fd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_parent(self, raw_path: str) -> tuple[int, str]:
        """A descriptor of the directory holding `raw_path`, and the name to use in it."""
        *parents, name = self._parts(raw_path) or (".",)
        return self._open_dir(tuple(parents)), name

    def read(self, raw_path: str, limit_chars: int = READ_LIMIT_CHARS) -> str:
        """The first `limit_chars` characters of a text file, reading a bounded prefix only."""
        with self._open_regular(raw_path) as (file, size_bytes):
            data = file.read(limit_chars * UTF8_MAX_BYTES_PER_CHAR)
        text = data.decode("utf-8", errors="replace")
        if len(text) <= limit_chars and len(data) >= size_bytes:
            return text
        return (
            text[:limit_chars] + f"\n[truncated: the file is {size_bytes} bytes; showing "
            f"the first {min(len(text), limit_chars)} characters]"
        )

    def read_bytes(self, raw_path: str) -> bytes:
        """A whole regular file, confined as `read` is (a mirror's copy, an export)."""
        with self._open_regular(raw_path) as (file, _size_bytes):
            return file.read()

    def _writable_parts(self, raw_path: str) -> tuple[str, ...]:
        """`_parts` of a path the file tools may write: no component (symlinks resolved) named
        like UNWRITABLE_NAMES. The write opens exactly these, never following a symlink."""
        parts = self._parts(raw_path)
        for part in parts:
            why = UNWRITABLE_NAMES.get(part.lower())
            if why:
                raise ToolFailed(
                    f"path {echoed(raw_path)!r} is in or names {part}, which the "
                    f"workspace file tools never write: {why}; reading it is "
                    "allowed"
                )
        return parts

    def write(self, raw_path: str, content: str) -> int:
        """Create or overwrite a file (parents created); returns the bytes written."""
        if not isinstance(content, str):
            raise ToolFailed("content must be a string (the full text of the file)")
        return self.write_bytes(raw_path, content.encode("utf-8"))

    def write_bytes(self, raw_path: str, data: bytes) -> int:
        """`write` for any content (a mirrored file need not be text)."""
        *parents, name = self._writable_parts(raw_path) or (".",)
        with _os_errors(raw_path):
            dir_fd = self._open_dir(tuple(parents), create=True)
            try:
                _replace_file(raw_path, dir_fd, name, data)
            finally:
                os.close(dir_fd)
        return len(data)

    def remove(self, raw_path: str) -> None:
        """Delete a file (a mirror's copy of one deleted elsewhere); gone already is fine."""
        *parents, name = self._writable_parts(raw_path) or (".",)
        with _os_errors(raw_path):
            try:
                dir_fd = self._open_dir(tuple(parents))
            except FileNotFoundError:
                return
            try:
                with suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)

    def edit(self, raw_path: str, old_text: str, new_text: str) -> int:
        """Replace the one exact occurrence of `old_text`; returns the new file size in bytes."""
        if not old_text:
            raise ToolFailed("oldText is required (the exact text to replace)")
        self._writable_parts(raw_path)  # before reading: refused is refused, whatever it holds
        text = self._read_for_edit(raw_path)
        count = text.count(old_text)
        if count != 1:
            raise ToolFailed(
                f"oldText occurs {count} times in {echoed(raw_path)}; it must "
                "occur exactly once (include more surrounding text)"
            )
        return self.write(raw_path, text.replace(old_text, new_text, 1))

    def list(self, raw_path: str = ".", limit_entries: int = LIST_LIMIT_ENTRIES) -> list[str]:
        """Files and directories under a directory (recursive, sorted; dirs end with '/').

        Entries are collected top level first and collection stops at `limit_entries`."""
        parts = self._parts(raw_path or ".")
        entries: list[str] = []
        with _os_errors(raw_path):
            try:
                dir_fd = self._open_dir(parts)
            except (FileNotFoundError, NotADirectoryError):
                raise ToolFailed(f"no such directory: {echoed(raw_path)}") from None
            try:
                complete = _collect(dir_fd, "".join(p + "/" for p in parts), entries, limit_entries)
            finally:
                os.close(dir_fd)
        return sorted(entries) + ([] if complete else [f"[truncated at {limit_entries} entries]"])

    def bash(
        self,
        command: str,
        timeout_s: float = BASH_TIMEOUT_S,
        limit_chars: int = BASH_OUTPUT_LIMIT_CHARS,
    ) -> dict[str, object]:
        """Run a shell command in the workspace, in a session of its own whose process group is
        killed after `timeout_s`, every process limited in CPU seconds (`timeout_s`), address
        space, file size and the user's process count (BASH_* above).

        The command ends when bash exits: background children may keep running (and holding the
        output pipe) without delaying the result. Output beyond `limit_chars` is counted, not kept.
        """
        if not command or not command.strip():
            raise ToolFailed("command is required")
        with private_home(self.real_root) as home:
            return self._bash_in(command, home, timeout_s, limit_chars)

    def _bash_in(
        self, command: str, home: Path, timeout_s: float, limit_chars: int
    ) -> dict[str, object]:
        # The shell sets its limits itself: a preexec_fn would run Python in the forked child
        # of a threaded process (the keep-alive thread), which can deadlock.
        process = subprocess.Popen(
            ["bash", "-c", _limits_script(timeout_s), "teamctl-bash", command],
            cwd=self.real_root,
            env=tool_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output = _OutputCap(limit_chars)
        try:
            exited = _read_until_exit(process, output, time.monotonic() + timeout_s)
        finally:
            if process.poll() is None:
                _kill_group(process)
            process.stdout.close()  # type: ignore[union-attr]
        if not exited:
            text = output.text()
            raise ToolFailed(
                f"command timed out after {timeout_s:g}s and was killed (commands "
                f"may run for at most {timeout_s:g}s; start longer jobs in the "
                "background with their output redirected to a file)"
                + (f"; output before the kill:\n{text}" if text else "")
            )
        return {"exitCode": process.returncode, "output": output.text()}

    @contextmanager
    def _open_regular(self, raw_path: str) -> Iterator[tuple[BinaryIO, int]]:
        """An open regular file with exactly one link, and its size in bytes.

        O_NOFOLLOW refuses a symlink swapped in after resolve(); O_NONBLOCK keeps a FIFO from
        blocking the open until fstat refuses it."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            dir_fd, name = self._open_parent(raw_path)
            try:
                fd = os.open(name, flags, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
        except FileNotFoundError:
            raise ToolFailed(f"no such file: {echoed(raw_path)}") from None
        except OSError as exc:
            raise ToolFailed(f"cannot open {echoed(raw_path)!r}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            _check_regular(raw_path, info)  # before fdopen(), which refuses directories itself
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as file, _os_errors(raw_path):
            yield file, info.st_size

    def _read_for_edit(self, raw_path: str) -> str:
        """The whole text of a UTF-8 file of at most EDIT_LIMIT_BYTES."""
        too_big = ToolFailed(
            f"{echoed(raw_path)} is too big to edit: edit_file works on files "
            f"up to {EDIT_LIMIT_BYTES} bytes (use bash, or write_file for the "
            "whole file)"
        )
        with self._open_regular(raw_path) as (file, size_bytes):
            if size_bytes > EDIT_LIMIT_BYTES:
                raise too_big
            data = file.read(EDIT_LIMIT_BYTES + 1)
        if len(data) > EDIT_LIMIT_BYTES:  # it grew after fstat
            raise too_big
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            # Decoding with replacement characters and writing back would corrupt the file.
            raise ToolFailed(
                f"{echoed(raw_path)} is not UTF-8 text; edit_file only edits UTF-8 files"
            ) from None


def tool_env(home: Path) -> dict[str, str]:
    """The environment of `bash` and stdio MCP servers: minimal (the worker's own holds
    REDIS_URL and provider API keys), HOME `home` (never the workspace: programs read their
    configuration there), and git's GIT_OVERRIDES with no system nor global config. GIT_PAGER,
    because `pager.<command>` outranks core.pager."""
    env = {
        "PATH": BASH_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_PAGER": "cat",
        "GIT_CONFIG_COUNT": str(len(GIT_OVERRIDES)),
    }
    for index, (key, value) in enumerate(GIT_OVERRIDES):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def _check_regular(raw_path: str, info: os.stat_result) -> None:
    """Refuse directories, devices, FIFOs and sockets, and files with more than one link."""
    if stat.S_ISDIR(info.st_mode):
        raise ToolFailed(f"{echoed(raw_path)} is a directory; use list_files")
    if not stat.S_ISREG(info.st_mode):
        raise ToolFailed(
            f"{echoed(raw_path)} is not a regular file; only regular files can be read"
        )
    if info.st_nlink > 1:
        # Another name for the inode may lie outside the workspace.
        raise ToolFailed(
            f"{echoed(raw_path)} has {info.st_nlink} hard links; hard-linked files "
            "are refused (write_file replaces it with a file of its own)"
        )


@contextmanager
def _os_errors(raw_path: str) -> Iterator[None]:
    """OSError as ToolFailed naming the model's path: the OSError text holds host paths."""
    try:
        yield
    except OSError as exc:
        raise ToolFailed(
            f"cannot use {echoed(raw_path)!r}: {exc.strerror or type(exc).__name__}"
        ) from None


def _collect(dir_fd: int, prefix: str, entries: list[str], limit_entries: int) -> bool:
    """Add the entries under an open directory, its own first; False once the limit stopped it.

    Symlinks to directories are listed like directories but never entered."""
    with os.scandir(dir_fd) as scan:
        children = list(scan)
    is_dir = {child.name: _is_dir(child) for child in children}
    dirs = sorted(name for name, is_a_dir in is_dir.items() if is_a_dir)
    files = sorted(name for name, is_a_dir in is_dir.items() if not is_a_dir)
    for name in [d + "/" for d in dirs] + files:
        if len(entries) == limit_entries:
            return False
        entries.append(prefix + name)
    for name in dirs:
        try:
            child_fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError:  # a symlink, or gone since the scan
            continue
        try:
            if not _collect(child_fd, prefix + name + "/", entries, limit_entries):
                return False
        finally:
            os.close(child_fd)
    return True


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether a directory entry is (or links to) a directory; False if it vanished."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _replace_file(raw_path: str, dir_fd: int, name: str, data: bytes) -> None:
    """Write a new file beside `name` in `dir_fd` and rename it over `name` (keeping its mode
    without execute, setuid, setgid or sticky bits).

    Never writes through an existing inode, so a hard link's other names keep their content,
    and readers never see half a file. Never executable: a member that may only write files
    must not be able to turn one into a program something else runs (an MCP server's script
    in the workspace, a hook)."""
    mode = _regular_file_mode(raw_path, dir_fd, name)
    temp = f".teamctl-write-{secrets.token_hex(8)}.tmp"
    # 0o644 (less under a stricter umask) and O_EXCL|O_NOFOLLOW: never an existing file.
    fd = os.open(
        temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, NEW_FILE_MODE, dir_fd=dir_fd
    )
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            if mode is not None:
                os.fchmod(file.fileno(), mode & ~NOT_WRITTEN_MODE_BITS)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def _regular_file_mode(raw_path: str, dir_fd: int, name: str) -> int | None:
    """The permission bits of the regular file `name`, or None if there is none.

    A directory there is refused: write_file would replace it with a file."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise ToolFailed(f"{echoed(raw_path)!r} is a directory")
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


class _OutputCap:
    """Keeps the first `limit_chars` characters of a byte stream and counts the rest."""

    def __init__(self, limit_chars: int) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._kept: list[str] = []
        self._room_chars = limit_chars
        self._dropped_chars = 0
        self._text: str | None = None

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        kept = text[: self._room_chars]
        if kept:
            self._kept.append(kept)
            self._room_chars -= len(kept)
        self._dropped_chars += len(text) - len(kept)

    def text(self) -> str:
        """What was kept, with a note on how much was not; no more may be fed after this."""
        if self._text is None:
            self.feed(b"", final=True)
            self._text = "".join(self._kept)
            if self._dropped_chars:
                self._text += f"\n[output truncated: {self._dropped_chars} more characters]"
        return self._text


def _read_until_exit(
    process: subprocess.Popen[bytes], output: _OutputCap, deadline_s: float
) -> bool:
    """Read output until bash exits (True) or the monotonic deadline passes (False)."""
    fd = process.stdout.fileno()  # type: ignore[union-attr]
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while process.poll() is None:
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                return False
            # A short select timeout: a background child may hold the pipe open after bash exits.
            if selector.select(min(remaining_s, BASH_POLL_S)) and not _read_chunk(fd, output):
                return _wait_until(process, deadline_s)  # EOF: nothing left but the exit
        _drain(selector, fd, output)
    return True


def _read_chunk(fd: int, output: _OutputCap) -> bool:
    """Read one chunk that select() reported ready; False at end of file."""
    data = os.read(fd, READ_CHUNK_BYTES)
    output.feed(data)
    return bool(data)


def _drain(selector: selectors.BaseSelector, fd: int, output: _OutputCap) -> None:
    """After bash exited, read what is still in the pipe, for at most BASH_DRAIN_S.

    No wait for end of file: a background child may hold the pipe open for ever."""
    deadline_s = time.monotonic() + BASH_DRAIN_S
    while (remaining_s := deadline_s - time.monotonic()) > 0:
        if not selector.select(min(remaining_s, BASH_POLL_S)) or not _read_chunk(fd, output):
            return


def _wait_until(process: subprocess.Popen[bytes], deadline_s: float) -> bool:
    """Wait for bash to exit by the monotonic deadline; False if it did not."""
    try:
        process.wait(timeout=max(deadline_s - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        return False
    return True


def _limits_script(timeout_s: float, proc_root: Path = PROC_ROOT) -> str:
    """The `ulimit` line that bounds a command, each limit no higher than the worker's own hard
    limit (raising one would fail, and the command with it); no process limit where
    `proc_root` is missing (a container without /proc), since the user's count is unknown."""
    tasks = _user_task_count(proc_root)
    processes = (
        ""
        if tasks is None
        else f" -u {_within_hard(resource.RLIMIT_NPROC, tasks + BASH_MORE_PROCESSES)}"
    )
    return BASH_LIMITED.format(
        cpu_s=_within_hard(resource.RLIMIT_CPU, max(1, math.ceil(timeout_s))),
        address_space_kib=_within_hard(resource.RLIMIT_AS, BASH_ADDRESS_SPACE_BYTES) // 1024,
        file_size_kib=_within_hard(resource.RLIMIT_FSIZE, BASH_FILE_SIZE_BYTES) // 1024,
        processes=processes,
    )


def _within_hard(limit: int, wanted: int) -> int:
    hard = resource.getrlimit(limit)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def _user_task_count(proc_root: Path = PROC_ROOT) -> int | None:
    """The processes and threads of this real user now, as RLIMIT_NPROC counts them; None
    when `proc_root` cannot be listed."""
    uid = os.getuid()
    count = 0
    try:
        entries = list(os.scandir(proc_root))
    except OSError:
        return None
    for entry in entries:
        with suppress(OSError):  # gone since the scan, or not ours to read
            # The directory's owner is the process's user: only our own need their status.
            if not entry.name.isdigit() or entry.stat().st_uid != uid:
                continue
            with open(proc_root / entry.name / "status", encoding="utf-8") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if fields.get("Uid", "").split()[:1] == [str(uid)]:
                count += int(fields.get("Threads", "1"))
    return count


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL bash's whole process group (its session's children share it) and reap bash."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    # Bounded: a process stuck in the kernel is left to the subprocess module's own reaping.
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=BASH_KILL_WAIT_S)
