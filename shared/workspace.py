"""A run's workspace directory: every path a member names must resolve inside it.

Confinement is by resolved path: absolute paths, `..` and symlinks are all resolved first, and
anything that ends up outside the root is refused with ToolFailed (a tool error for the model).
`bash` is NOT confined this way (a shell can `cd /`); it only starts in the workspace, which is why
it is off unless a member enables it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from shared.errors import ToolFailed

READ_LIMIT_CHARS = 64_000
LIST_LIMIT_ENTRIES = 500
BASH_TIMEOUT_S = 60.0
BASH_OUTPUT_LIMIT_CHARS = 16_000


@dataclass(frozen=True)
class Workspace:
    """File operations confined to `root`."""

    root: Path

    def resolve(self, raw_path: str) -> Path:
        """The real path of `raw_path` (relative to the root), refused if it leaves the root."""
        if not raw_path or not raw_path.strip():
            raise ToolFailed("path is required")
        root = self.root.resolve()
        candidate = Path(raw_path.strip())
        target = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if target != root and not target.is_relative_to(root):
            raise ToolFailed(f"path {raw_path!r} is outside the workspace; use a path relative "
                             "to the workspace root")
        return target

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root.resolve())) or "."

    def read(self, raw_path: str, limit_chars: int = READ_LIMIT_CHARS) -> str:
        path = self.resolve(raw_path)
        if not path.is_file():
            raise ToolFailed(f"no such file: {raw_path}")
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text) > limit_chars:
            return text[:limit_chars] + f"\n[truncated: {len(text)} chars in total]"
        return text

    def write(self, raw_path: str, content: str) -> int:
        """Create or overwrite a file (parents created); returns the bytes written."""
        path = self.resolve(raw_path)
        if path.is_dir():
            raise ToolFailed(f"{raw_path} is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        path.write_bytes(data)
        return len(data)

    def edit(self, raw_path: str, old_text: str, new_text: str) -> int:
        """Replace the one exact occurrence of `old_text`; returns the new file size in bytes."""
        if not old_text:
            raise ToolFailed("oldText is required (the exact text to replace)")
        text = self.read(raw_path, limit_chars=10**9)
        count = text.count(old_text)
        if count != 1:
            raise ToolFailed(f"oldText occurs {count} times in {raw_path}; it must occur exactly "
                             "once (include more surrounding text)")
        return self.write(raw_path, text.replace(old_text, new_text, 1))

    def list(self, raw_path: str = ".", limit: int = LIST_LIMIT_ENTRIES) -> list[str]:
        """Files and directories under a directory (recursive, sorted; dirs end with '/')."""
        base = self.resolve(raw_path or ".")
        if not base.is_dir():
            raise ToolFailed(f"no such directory: {raw_path}")
        entries: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            here = Path(dirpath)
            entries += [self.relative(here / d) + "/" for d in dirnames]
            entries += [self.relative(here / f) for f in sorted(filenames)]
            if len(entries) >= limit:
                return sorted(entries)[:limit] + [f"[truncated at {limit} entries]"]
        return sorted(entries)

    def bash(self, command: str, timeout_s: float = BASH_TIMEOUT_S,
             limit_chars: int = BASH_OUTPUT_LIMIT_CHARS) -> dict[str, object]:
        """Run a shell command in the workspace; killed (whole process group) after `timeout_s`."""
        if not command or not command.strip():
            raise ToolFailed("command is required")
        process = subprocess.Popen(
            ["bash", "-c", command], cwd=self.root.resolve(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # The shell's children share its session: kill them all, not just bash.
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise ToolFailed(f"command timed out after {timeout_s:g}s and was killed") from None
        text = output.decode("utf-8", errors="replace")
        if len(text) > limit_chars:
            text = text[:limit_chars] + f"\n[truncated: {len(text)} chars in total]"
        return {"exitCode": process.returncode, "output": text}
