"""Workspace confinement: the Workspace itself, and the workspace tools in a member session."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from shared.errors import ToolFailed
from shared.models import TaskSpec
from shared.workspace import Workspace
from tests.scripted_llm import ScriptedLLM, ToolCalls
from tests.test_worker_support import make_run, tool_names, tool_results
from worker.jobs import execute_task


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "inside.txt").write_text("hello")
    (root / "escape").symlink_to("/etc")
    (root / "passwd-link").symlink_to("/etc/passwd")
    return Workspace(root)


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "escape/passwd",
                                  "passwd-link", "sub/../../outside.txt", "..", ""])
def test_paths_that_leave_the_workspace_are_refused(workspace: Workspace, path: str) -> None:
    with pytest.raises(ToolFailed):
        workspace.read(path)
    with pytest.raises(ToolFailed):
        workspace.write(path, "x")
    assert not (workspace.root.parent / "outside.txt").exists()


def test_paths_inside_the_workspace_work(workspace: Workspace) -> None:
    assert workspace.read("inside.txt") == "hello"
    assert workspace.read(str(workspace.root / "inside.txt")) == "hello"
    assert workspace.write("a/b/c.txt", "deep") == 4
    assert workspace.edit("a/b/c.txt", "deep", "deeper") == 6
    assert (workspace.root / "a/b/c.txt").read_text() == "deeper"
    assert workspace.list(".") == ["a/", "a/b/", "a/b/c.txt", "escape/", "inside.txt",
                                   "passwd-link"]
    with pytest.raises(ToolFailed, match="occurs 0 times"):
        workspace.edit("a/b/c.txt", "missing", "x")


def test_bash_runs_in_the_workspace_with_a_timeout_and_an_output_cap(
        workspace: Workspace) -> None:
    result = workspace.bash("pwd; echo made > made.txt")
    assert result["exitCode"] == 0
    assert result["output"].strip() == str(workspace.root.resolve())
    assert (workspace.root / "made.txt").read_text() == "made\n"
    assert len(workspace.bash("yes | head -c 100000", limit_chars=100)["output"]) < 200
    started = time.monotonic()
    with pytest.raises(ToolFailed, match="timed out"):
        workspace.bash("sleep 30", timeout_s=0.3)
    assert time.monotonic() - started < 5


def test_member_workspace_tools_write_inside_and_refuse_escapes(
        conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "escape").symlink_to("/etc")
    model = llm.script(f"m1-{run_id}", [
        ToolCalls([("write_file", {"path": "notes/plan.md", "content": "step one"}),
                   ("edit_file", {"path": "notes/plan.md", "oldText": "one", "newText": "two"}),
                   ("read_file", {"path": "../../etc/passwd"}),
                   ("read_file", {"path": "/etc/passwd"}),
                   ("read_file", {"path": "escape/passwd"}),
                   ("write_file", {"path": "../outside.txt", "content": "x"}),
                   ("list_files", {}),
                   ("bash", {"command": "cat /etc/passwd"})]),
        "wrote the plan"])
    make_run(conn, run_id, models={"m1": model}, workspace=root, api_base=llm.api_base,
             tasks=[TaskSpec(id="task_1", member_id="m1", task="Write a plan")],
             tools={"m1": ["read_file", "write_file", "edit_file", "list_files"]})

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    first, second = llm.requests[f"m1-{run_id}"]
    assert tool_names(first)[:4] == ["read_file", "write_file", "edit_file", "list_files"]
    assert "bash" not in tool_names(first)
    write, edit, up, absolute, link, outside, listing, bash = tool_results(second)
    assert json.loads(write)["ok"] and json.loads(edit)["ok"]
    assert (root / "notes/plan.md").read_text() == "step two"
    for refused in (up, absolute, link, outside):
        assert refused.startswith("TOOL_ERROR: ") and "outside the workspace" in refused
    assert not (tmp_path / "outside.txt").exists()
    assert json.loads(listing)["entries"] == ["escape/", "notes/", "notes/plan.md"]
    assert bash.startswith("TOOL_ERROR: ") and "Unknown tool 'bash'" in bash


def test_bash_is_offered_when_enabled(
        conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path) -> None:
    model = llm.script(f"m1-{run_id}", [
        ToolCalls([("bash", {"command": "echo built > out.txt && ls"})]), "ran it"])
    make_run(conn, run_id, models={"m1": model}, workspace=tmp_path / "ws",
             api_base=llm.api_base, tools={"m1": ["bash"]},
             tasks=[TaskSpec(id="task_1", member_id="m1", task="Build")])

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    (result,) = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert json.loads(result) == {"action": "bash", "ok": True, "exitCode": 0,
                                  "output": "out.txt\n"}
    assert (tmp_path / "ws" / "out.txt").read_text() == "built\n"
