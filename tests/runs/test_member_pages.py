"""Bounded results of a planned run's member tools: after 200 messages of 60 KB on a run's bus,
each team_read_messages answer fits tool_result_max_chars, says how many remain, and the member
pages through every message once (no read's script over the 5 ms rule); what a lost attempt
read comes back to the next attempt in bounded pages too; team_list_tasks pages a board whose
outputs overflow the cap; and the Toolbox cuts whatever any tool answers (a Python tool's 1 MB,
a huge error) to the cap. Real Redis; the member's toolbox is driven as an attempt drives it
(read, then acknowledge before the next model call)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.agent.python_tools import ToolContext, add_python_tools
from teamctl.shared.agent.tools import NoArgs, Toolbox
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.errors import ToolFailed
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskSpec
from teamctl.worker.runs.claims import Claim, Claims
from teamctl.worker.runs.mailbox import Mailbox
from teamctl.worker.runs.member_tools import MemberToolContext, add_member_tools

from tests.support.replies import error_of
from tests.support.runs import make_run
from tests.support.slowlog import (
    first_within_the_rule,
    script_shas,
    slow_scripts_ms,
    slowlog_at_the_rule,
    within_the_rule,
)

CAP = RunOptions().tool_result_max_chars
FIXTURE = "tests.pytools_fixture.tools"


@dataclass
class Session:
    """One member session on a claim of `task_id`, its tools as an attempt builds them."""

    board: TaskBoard
    toolbox: Toolbox
    mailbox: Mailbox
    claim: Claim

    def call(self, name: str, **arguments: Any) -> tuple[dict[str, Any], int]:
        """The tool's answer, and its length as the model gets it."""
        text = self.toolbox.call(name, json.dumps(arguments), "call_1")
        return json.loads(text), len(text)

    def read(self) -> tuple[dict[str, Any], int]:
        """team_read_messages, then what the next model call does: acknowledge the read."""
        answer = self.call("team_read_messages")
        assert self.mailbox.acknowledge()
        return answer


def start_run(conn: redis.Redis, run_id: str, tmp_path: Path, tasks: list[TaskSpec]) -> None:
    make_run(
        conn,
        run_id,
        models={"m1": "m", "m2": "m"},
        tasks=tasks,
        workspace=tmp_path / "ws",
        api_base="http://127.0.0.1:9",
    )


def session(conn: redis.Redis, run_id: str, task_id: str = "task_1") -> Session:
    """m1 claims `task_id` and gets the team tools, within the run's tool_result_max_chars."""
    run = RunHandle(conn, run_id)
    token = run.board.claim(task_id, "m1", "test-worker", 60)
    assert token is not None
    claim, claims = Claim(task_id, token, "m1"), Claims()
    claims.add(claim)
    mailbox = Mailbox(run.bus, "m1", claim)
    toolbox = Toolbox(max_result_chars=CAP)
    add_member_tools(
        toolbox,
        MemberToolContext(
            board=run.board,
            bus=run.bus,
            member_ids=["m1", "m2"],
            member_id="m1",
            claim=claim,
            claims=claims,
            worker="test-worker",
            heartbeat_ttl_s=60,
            mailbox=mailbox,
            result_max_chars=CAP,
        ),
    )
    return Session(run.board, toolbox, mailbox, claim)


def send(conn: redis.Redis, run_id: str, count: int, chars: int) -> None:
    bus = RunHandle(conn, run_id).bus
    for index in range(count):
        assert bus.send("m2", "m1", None, "task_1", f"{index:03d}:" + "x" * chars)


def test_200_messages_of_60_kb_come_one_answer_at_a_time_within_the_cap(
    conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    answers: list[tuple[dict[str, Any], int]] = []
    fresh_ids = (f"{run_id}-{n}" for n in itertools.count())

    def measure() -> list[float]:
        """Page through the messages of a fresh run (a repeat must read them all again)."""
        fresh = next(fresh_ids)
        start_run(
            conn, fresh, tmp_path / fresh, [TaskSpec(id="task_1", member_id="m1", task="Read")]
        )
        send(conn, fresh, 200, 60_000)
        member = session(conn, fresh)
        with slowlog_at_the_rule(conn):
            answers[:] = [member.read() for _ in range(201)]
            return slow_scripts_ms(conn, script_shas("read_unread", "ack_reads"))

    slow = first_within_the_rule(measure, calls=402)
    assert within_the_rule(slow, calls=402), slow
    seen = []
    for answer, size in answers:
        assert size <= CAP
        if not answer["count"]:
            break
        [message] = answer["messages"]  # each message alone is longer than the cap
        assert "\n[truncated: the message has 60004 characters; the first " in message["content"]
        seen.append(message["content"][:3])
        left = 200 - len(seen)
        assert (answer.get("remaining"), answer.get("note")) == (
            (left, f"{left} more unread messages: call team_read_messages again to read them")
            if left
            else (None, None)
        )
    assert seen == [f"{index:03d}" for index in range(200)]
    assert answer == {
        "action": "team_read_messages",
        "ok": True,
        "memberId": "m1",
        "count": 0,
        "hasNewMessages": False,
    }


def test_what_a_lost_attempt_read_comes_back_in_bounded_pages(
    conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """The first attempt reads three pages and is lost before its next model call: the next
    attempt gets those messages again first, a page at a time, then the rest, each once."""
    start_run(conn, run_id, tmp_path, [TaskSpec(id="task_1", member_id="m1", task="Read")])
    send(conn, run_id, 100, 1000)
    lost = session(conn, run_id)
    read_before = []
    for _ in range(3):
        answer, size = lost.call("team_read_messages")
        assert size <= CAP and 1 < answer["count"] < 30
        read_before += [m["content"] for m in answer["messages"]]
    assert lost.board.release("task_1", lost.claim.token) is WriteOutcome.APPLIED

    again = session(conn, run_id)
    contents = []
    while True:
        answer, size = again.read()
        assert size <= CAP
        if not answer["count"]:
            break
        assert (
            1 < answer["count"] < 30
            and answer.get("remaining", 0) == 100 - len(contents) - answer["count"]
        )
        contents += [m["content"] for m in answer["messages"]]
    assert contents[: len(read_before)] == read_before
    assert contents == [f"{index:03d}:" + "x" * 1000 for index in range(100)]


def test_team_list_tasks_pages_a_board_whose_outputs_overflow_the_cap(
    conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    tasks = [TaskSpec(id=f"t{n:02d}", member_id="m2", task=f"job {n}") for n in range(60)]
    start_run(conn, run_id, tmp_path, [TaskSpec(id="task_1", member_id="m1", task="List"), *tasks])
    board = RunHandle(conn, run_id).board
    for n in range(40):  # done, with long outputs; t00's alone is longer than the cap
        token = board.claim(f"t{n:02d}", "m2", "w", 60)
        assert token is not None
        output = f"{n:02d}:" + "o" * (100_000 if n == 0 else 2_000)
        assert board.complete(f"t{n:02d}", token, output, 5) is WriteOutcome.APPLIED
    member = session(conn, run_id)

    listed: list[str] = []
    offset = 0
    while True:
        answer, size = member.call("team_list_tasks", offset=str(offset))
        assert size <= CAP and answer["total"] == 61
        listed += [t["taskId"] for t in answer["tasks"]]
        if answer["remaining"] == 0:
            assert "nextOffset" not in answer
            break
        assert answer["nextOffset"] == offset + len(answer["tasks"]) == 61 - answer["remaining"]
        assert answer["note"].endswith(
            f"{answer['remaining']} more tasks: call team_list_tasks "
            f"with offset={answer['nextOffset']} for the next page"
        )
        offset = answer["nextOffset"]
    assert listed == ["task_1", *(t.id for t in tasks)]

    first, _ = member.call("team_list_tasks", offset="1", limit="1")
    [big] = first["tasks"]
    assert big["output"].startswith("00:ooo") and big["output"].endswith(
        "[truncated: the output has 100003 characters; the first "
        f"{len(big['output'].split(chr(10))[0])} are shown]"
    )
    assert first["note"].startswith("this task's texts were cut to fit tool_result_max_chars")
    done, _ = member.call("team_list_tasks", status="completed", offset="1", limit="5")
    assert (done["total"], [t["taskId"] for t in done["tasks"]], done["remaining"]) == (
        40,
        ["t01", "t02", "t03", "t04", "t05"],
        34,
    )
    assert "offset" in error_of(member.toolbox.call("team_list_tasks", '{"offset": "-1"}'))["error"]


def test_the_toolbox_cuts_any_result_to_its_cap() -> None:
    """A Python tool whose own cap is larger, a tool that sets none, and an error whose text is
    all escapes: each answer fits the Toolbox's cap and says it was cut."""
    box = Toolbox()
    add_python_tools(
        box,
        [f"{FIXTURE}:long_text"],
        ToolContext(member_id="m1", workspace=Path("."), heartbeat=lambda: True),
        10_000_000,
        timeout_s=5,
    )
    huge = box.call("long_text", json.dumps({"chars": 1_000_000}))
    assert len(huge) <= CAP == box.max_result_chars
    kept = len(huge.split("\n")[0])
    assert huge.endswith(
        f"\n[truncated: the result has 1000000 characters; the first {kept} are shown]"
    )

    def unbounded(_: NoArgs) -> dict[str, str]:
        return {"blob": "é" * 1_000_000}

    box.add("unbounded", "Answers a megabyte.", NoArgs, unbounded)
    assert len(box.call("unbounded", "{}")) <= CAP

    def failing(_: NoArgs) -> str:
        raise ToolFailed('"\\' * 50_000)

    small = Toolbox(max_result_chars=5000)
    small.add("failing", "Fails at length.", NoArgs, failing)
    result = small.call("failing", "{}", "call_9")
    assert len(result) <= 5000
    error = error_of(result)
    assert (error["errorType"], error["tool"], error["callId"]) == (
        "ToolFailed",
        "failing",
        "call_9",
    )
    assert "[truncated: the error has " in error["error"]
