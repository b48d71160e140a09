"""Tools are never blindly repeated: the journal records each tool call's start before it runs,
and after a crash the next attempt runs a call that started and left no result (in doubt) again
only when its tool is safe to repeat; any other call's result is an in-doubt note naming the
call's idempotency key. Transcripts mark such calls.

The crash tests start three workers of their own on a queue of their own (as test_journal) and
SIGKILL the one whose member is inside a Python tool that marked a file and then blocks."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.coordinator.web.render import render
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts, add_mcp_tools
from teamctl.shared.agent.python_tools import add_python_tools
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.journal import InDoubt, StepJournal, in_doubt_text
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.tools import add_workspace_tools

from teamctl.tools import ToolContext, tool
from tests.support.cli import run_one_task_in_thread
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.timescale import scaled
from tests.support.waiting import wait_until
from tests.support.workers import job_and_worker_pids, workers_on_own_queue

TTL_S = scaled(RunOptions().heartbeat_ttl_s, floor_s=1.5)
TOOLS = "tests.pytools_fixture.tools"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_workers(
    redis_server: str, queue: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalWorkers]:
    with workers_on_own_queue(
        redis_server, queue, 3, tmp_path_factory.mktemp("in-doubt-logs")
    ) as group:
        yield group


class OneToolCall:
    """The member: one call of `tool` (which marks `marks`), then its answer, saying what the
    tool's result was."""

    def __init__(self, tool: str, marks: Path) -> None:
        self.tool = tool
        self.marks = marks

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return ToolCalls([(self.tool, {"path": str(self.marks)})])
        return f"done after: {results[-1]}"


@dataclass
class Crashed:
    """What a run whose worker was killed mid-tool ended with."""

    run_id: str
    conn: redis.Redis
    marks: list[str]
    """The idempotency keys the tool wrote, one line per time it really ran."""
    requests: list[dict[str, Any]]
    """The member's model requests."""
    key: str
    """The tool call's idempotency key."""

    @property
    def last_tool_result(self) -> str:
        return str([m for m in self.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"])

    def stored_transcript(self) -> list[dict[str, Any]]:
        kept: list[dict[str, Any]] = json.loads(
            self.conn.get(RunKeys(self.run_id).transcript("work")) or "null"
        )
        return kept


def crash_mid_tool(
    llm: ScriptedLLM, redis_url: str, run_id: str, queue: str, tmp_path: Path, tool: str
) -> Crashed:
    """Run a member whose first step calls `tool`; SIGKILL its worker once the tool marked its
    file (it then blocks); another worker takes the task after reclaim and finishes it."""
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    marks = tmp_path / "marks.log"
    model = llm.script(f"m1-{run_id}", handler=OneToolCall(tool, marks))
    thread, results = run_one_task_in_thread(
        llm,
        redis_url,
        run_id,
        queue,
        tmp_path,
        member_model=model,
        tool=f"{TOOLS}:{tool}",
        task="Mark the file",
        heartbeat_ttl_s=TTL_S,
    )
    try:
        wait_until(marks.exists, 90, message="the tool's first mark")
        horse, parent = job_and_worker_pids(board.get("work").worker or "")
        os.kill(parent, signal.SIGKILL)
        os.kill(horse, signal.SIGKILL)
    finally:
        thread.join(90 + 2 * TTL_S)
    assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
    task = board.get("work")
    assert (task.status, task.attempts, task.replayed_steps) == (TaskStatus.COMPLETED, 2, 1)
    return Crashed(
        run_id,
        conn,
        marks.read_text().split(),
        llm.requests[f"m1-{run_id}"],
        f"{run_id}:work:call_0",
    )


def transcript_lines(crashed: Crashed, redis_url: str) -> list[str]:
    """`teamctl transcript RUN work`, line by line."""
    shown = CliRunner().invoke(
        main, ["transcript", crashed.run_id, "work", "--redis-url", redis_url]
    )
    assert shown.exit_code == 0, shown.output
    return shown.output.splitlines()


def test_a_call_in_doubt_is_not_run_again_and_the_model_is_told(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    own_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    crashed = crash_mid_tool(llm, redis_server, run_id, queue, tmp_path, "mark_and_block")

    assert crashed.marks == [crashed.key]  # ran once: the dead attempt's call
    told = in_doubt_text("mark_and_block", crashed.key)
    assert told == (
        "[teamctl] in doubt: an earlier attempt started this call of mark_and_block and "
        "stopped before it returned; it may or may not have taken effect. Its idempotency key "
        f"is {crashed.key}. Check before calling it again."
    )
    # The first attempt's one request, then the second attempt's (step 1 was replayed).
    assert len(crashed.requests) == 2
    assert crashed.last_tool_result == told
    # The in-doubt answer is journaled as the call's result: a second crash gives the same.
    journal = [json.loads(e) for e in crashed.conn.lrange(RunKeys(run_id).journal("work"), 0, -1)]
    assert [(e["kind"], e.get("call_id"), e.get("in_doubt")) for e in journal] == [
        ("reply", None, None),
        ("start", "call_0", None),
        ("tool", "call_0", "not re-run"),
        ("reply", None, None),
    ]
    assert journal[1]["tool"] == "mark_and_block" and journal[2]["content"] == told

    stored = crashed.stored_transcript()
    [tool_message] = [m for m in stored if m["role"] == "tool"]
    assert (tool_message["in_doubt"], tool_message["content"]) == ("not re-run", told)
    assert f"tool mark_and_block (in doubt: not re-run): {told}" in transcript_lines(
        crashed, redis_server
    )
    page = render("_transcript.html", transcript=stored)
    assert '<b>tool</b> mark_and_block <span class="in-doubt">in doubt: not re-run</span>' in page


def test_an_idempotent_call_in_doubt_runs_again_once(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    own_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    crashed = crash_mid_tool(
        llm, redis_server, run_id, queue, tmp_path, "mark_and_block_idempotent"
    )

    assert crashed.marks == [crashed.key, crashed.key]  # the dead attempt's call, and once more
    assert len(crashed.requests) == 2
    assert crashed.last_tool_result == "marked 2 time(s)"
    stored = crashed.stored_transcript()
    [tool_message] = [m for m in stored if m["role"] == "tool"]
    assert tool_message["in_doubt"] == "re-run"
    assert stored[-2]["content"] == "done after: marked 2 time(s)"
    assert (
        "tool mark_and_block_idempotent (in doubt: re-run (safe to repeat)): marked 2 time(s)"
        in transcript_lines(crashed, redis_server)
    )


def test_a_transcript_shows_only_known_in_doubt_marks() -> None:
    """The stored mark is read back, not trusted: an unknown one is not shown at all."""
    hostile = "\x1b[31m<b>owned</b>"
    kept = [
        {"role": "tool", "name": "t", "content": "ok", "in_doubt": hostile},
        {"role": "tool", "name": "u", "content": "ok", "in_doubt": "re-run"},
    ]
    page = render("_transcript.html", transcript=kept)
    assert "owned" not in page and page.count('class="in-doubt"') == 1
    assert '<span class="in-doubt">in doubt: re-run (safe to repeat)</span>' in page


def test_mcp_tools_annotated_read_only_or_idempotent_are_safe_to_repeat(tmp_path: Path) -> None:
    """The fixture server's own listing: `lookup` says readOnlyHint, `reindex` idempotentHint,
    the rest neither; the toolbox built from it repeats only those two."""
    index = McpServer(
        name="index",
        command=[sys.executable, "-m", "tests.mcp_fixture.stdio_server"],
        env={"PYTHONPATH": str(REPO_ROOT)},
    )
    toolbox = Toolbox()
    with McpHub(tmp_path, McpTimeouts(30, 30, 10)) as hub:
        listed = hub.start(index)
        added = add_mcp_tools(toolbox, hub, index, listed, ["index"], 10_000)
    hints = {t.name: (t.read_only, t.idempotent) for t in listed}
    assert (hints["lookup"], hints["reindex"], hints["stats"]) == (
        (True, False),
        (False, True),
        (False, False),
    )
    assert [name for name in added if toolbox.safe_to_repeat(name)] == [
        "index__lookup",
        "index__reindex",
    ]
    assert len(added) == len(listed) > 2
    # The run's cache keeps the hints beside each tool's schema.
    assert {t.name: (t.as_json()["read_only"], t.as_json()["idempotent"]) for t in listed} == hints


def test_the_journal_reads_back_which_calls_started_and_what_an_attempt_did_with_doubt(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    conn.hset(keys.task("t1"), mapping={"task_id": "t1", "token": "5@e", "status": "in_progress"})
    journal = StepJournal(conn, keys, "t1", "5@e", 10_000)
    journal.record_reply("m1", 1, ModelReply(content="two calls"))
    journal.record_start("m1", 1, "call_0", "write_file")
    journal.record_start("m1", 1, "call_1", "read_file")
    journal.record_result("m1", 1, "call_1", "its text", InDoubt.RERUN)
    [step] = journal.steps_for("m1", crashed=True)
    assert step.started == {"call_0": "write_file", "call_1": "read_file"}
    assert (step.results, step.in_doubt) == ({"call_1": "its text"}, {"call_1": InDoubt.RERUN})
    assert [step.is_in_doubt(c) for c in ("call_0", "call_1", "call_2")] == [True, False, False]


def test_only_declared_python_tools_and_reading_workspace_tools_are_safe_to_repeat(
    tmp_path: Path,
) -> None:
    toolbox = Toolbox()
    add_workspace_tools(
        toolbox, Workspace(tmp_path), ["read_file", "write_file", "edit_file", "list_files", "bash"]
    )
    context = ToolContext(member_id="m1", workspace=tmp_path, heartbeat=lambda: True)
    entries = [f"{TOOLS}:mark_and_block", f"{TOOLS}:mark_and_block_idempotent"]
    add_python_tools(toolbox, entries, context, 10_000, timeout_s=5)
    assert {name: toolbox.safe_to_repeat(name) for name in toolbox.names} == {
        "read_file": True,
        "write_file": False,
        "edit_file": False,
        "list_files": True,
        "bash": False,
        "mark_and_block": False,
        "mark_and_block_idempotent": True,
    }
    assert not toolbox.safe_to_repeat("no_such_tool")

    @tool(read_only=True)
    def peek(path: str) -> str:
        """Read-only, and otherwise the plain function it was."""
        return path

    assert (
        peek("x") == "x" and peek.__doc__ == "Read-only, and otherwise the plain function it was."
    )
