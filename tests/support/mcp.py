"""What the MCP tests set up and check around a server: a git repository for mcp-server-git to
read, and the processes a server may have left running in a directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def processes_in(directory: Path) -> list[int]:
    """Pids of processes whose working directory is `directory` (a server left running)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == directory:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def git_repository(path: Path) -> None:
    """A repository at `path` with one commit of notes.txt."""
    path.mkdir(parents=True)
    run = {"cwd": path, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)
    (path / "notes.txt").write_text("hello\n")
    subprocess.run(["git", "add", "notes.txt"], **run)
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=Tess",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            "Add the release notes",
        ],
        **run,
    )
