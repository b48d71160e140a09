"""README promises about the `bash` tool: its timeout kills the whole process group, even
children that ignore SIGTERM, and a member gets at most 16,000 characters of its output."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import redis
from teamctl.shared.errors import ToolFailed
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.workspace.directory import Workspace
from teamctl.worker.jobs import execute_task

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import tool_results
from tests.support.runs import make_run
from tests.support.waiting import wait_until
from tests.support.workers import exited

# bash ignores SIGTERM, starts a child bash that ignores it too, which starts a grandchild sleep.
STUBBORN = (
    "trap '' TERM; "
    "bash -c 'trap \"\" TERM; sleep 300 & echo grandchild $!; wait' & "
    "echo child $!; wait"
)


def test_bash_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    started = time.monotonic()

    with pytest.raises(ToolFailed, match="timed out after 1.5s and was killed") as raised:
        workspace.bash(STUBBORN, timeout_s=1.5)

    # Killed at the timeout, not waited for: a generous bound, far from the grandchild's 300 s.
    assert time.monotonic() - started < 60
    pids = {
        name: int(pid) for name, pid in re.findall(r"(child|grandchild) (\d+)", str(raised.value))
    }
    assert set(pids) == {"child", "grandchild"}, str(raised.value)
    wait_until(
        lambda: all(exited(pid) for pid in pids.values()),
        5,
        message="the child and grandchild to be gone",
    )


def test_bash_tool_gives_the_member_at_most_16000_characters(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"m1-{run_id}",
        [ToolCalls([("bash", {"command": "head -c 100000 /dev/zero | tr '\\0' y"})]), "done"],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model},
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        tools={"m1": ["bash"]},
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Print a lot")],
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    (result,) = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert json.loads(result) == {
        "action": "bash",
        "ok": True,
        "exitCode": 0,
        "output": "y" * 16_000 + "\n[output truncated: 84000 more characters]",
    }
