"""What the MCP tests set up and check around a server: a git repository for mcp-server-git to
read, a tiny Python server's wheel for uvx, the processes a server may have left running in a
directory, and runs stored for jobs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member
from teamctl.shared.workspace.caps import WorkspaceStore

TINY_UV = Path(__file__).resolve().parents[1] / "mcp_fixture" / "tiny_uv"


def tiny_uv_wheel(directory: Path) -> Path:
    """tests/mcp_fixture/tiny_uv built into a wheel in `directory` (from a copy: the build
    leaves files beside its source): the wheel's path."""
    source = directory / "tiny_uv"
    shutil.copytree(TINY_UV, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--no-index", str(source), "--wheel-dir", str(directory / "dist")],
        check=True,
        capture_output=True,
    )
    (wheel,) = (directory / "dist").glob("tiny_mcp_py-*.whl")
    return wheel


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
    run: dict[str, Any] = {"cwd": path, "check": True, "capture_output": True}
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


def stored_run(
    conn: redis.Redis,
    run_id: str,
    model: str,
    api_base: str,
    workspace: Path,
    member: Member,
    tasks: int = 1,
    *,
    workspace_store: WorkspaceStore = "local",
    **options: Any,
) -> None:
    """A run of one member with `tasks` tasks (task_1, task_2, ...), stored for jobs to run,
    its workspace in `workspace` or, with `workspace_store="redis"`, in Redis."""
    workspace.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective="Use MCP",
        members=[member],
        options=RunOptions(**options),
        models=ModelChoice(
            planner=model, synthesizer=model, member_default=model, api_base=api_base
        ),
        workspace_dir=str(workspace),
        workspace_store=workspace_store,
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(
        [TaskSpec(id=f"task_{n}", member_id=member.id, task="Go") for n in range(1, tasks + 1)]
    )


def end_run(conn: redis.Redis, run_id: str) -> None:
    """Mark a stored run completed, as its coordinator would when it ends."""
    conn.hset(RunKeys(run_id).state, "status", "completed")
