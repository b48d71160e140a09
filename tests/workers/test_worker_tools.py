"""The member runtime in-process (execute_task, the RQ job body) against real Redis and litellm
over HTTP to the scripted server: team tools, tool errors, retries, usage, budgets, cancel."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.worker.jobs import execute_task

from tests.support.llm import HttpError, ScriptedLLM, ToolCalls
from tests.support.replies import parsed, tool_names, tool_results
from tests.support.runs import make_run

TEAM_TOOLS = [
    "team_send_message",
    "team_broadcast",
    "team_read_messages",
    "team_list_tasks",
    "team_claim_task",
    "team_release_task",
    "team_reassign_task",
    "team_heartbeat_task",
]


def one_task(member: str = "m1", task_id: str = "task_1", **extra: Any) -> TaskSpec:
    return TaskSpec(id=task_id, member_id=member, task=f"Do {task_id}", **extra)


def messages(conn: redis.Redis, run_id: str) -> list[tuple[str, str | None, str]]:
    bus = MessageBus(conn, RunKeys(run_id))
    return [(m.from_, m.to, m.type) for m in bus.messages()]


def test_tool_errors_go_back_to_the_model_and_the_task_completes(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    ("team_send_message", {"toMemberId": "lead", "content": "hi"}),
                    ("team_broadcast", '{"content": "no closing brace"'),
                    ("no_such_tool", {}),
                    ("team_claim_task", {}),
                ]
            ),
            "done despite errors",
        ],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    first, second = llm.requests[f"m1-{run_id}"]
    assert tool_names(first) == TEAM_TOOLS
    send = first["tools"][0]["function"]
    assert list(send["parameters"]["properties"]) == ["toMemberId", "content", "type", "taskId"]
    assert send["parameters"]["required"] == ["toMemberId", "content"]
    unknown_member, bad_json, unknown_tool, claim = tool_results(second)
    assert unknown_member.startswith("TOOL_ERROR: ")
    assert "unknown team member: lead" in json.loads(unknown_member[12:])["error"]
    assert bad_json.startswith("TOOL_ERROR: ") and "not JSON" in bad_json
    assert json.loads(bad_json[12:])["tool"] == "team_broadcast"
    assert "Unknown tool 'no_such_tool'" in unknown_tool and "team_send_message" in unknown_tool
    # Claiming the task being executed (the default taskId) fails: it is already in progress.
    assert list(parsed(claim))[:3] == ["action", "ok", "memberId"]
    assert parsed(claim) | {"taskState": None} == {
        "action": "team_claim_task",
        "ok": False,
        "memberId": "m1",
        "taskId": "task_1",
        "taskState": None,
    }
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert task.status is TaskStatus.COMPLETED and task.output == "done despite errors"
    # Two calls of 11 + 7 tokens from the scripted server; no price for it: flagged unpriced.
    assert (task.usage.prompt_tokens, task.usage.completion_tokens) == (22, 14)
    assert task.usage.unpriced and task.usage.cost_usd == 0
    run_usage = RunStore(conn, RunKeys(run_id)).usage()
    assert (run_usage.prompt_tokens, run_usage.completion_tokens, run_usage.unpriced) == (
        22,
        14,
        True,
    )
    assert messages(conn, run_id) == [
        ("system", "m1", "task.assigned"),
        ("m1", "lead", "task.result"),
    ]


def test_message_fields_are_bounded_not_only_the_content(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """A 300 kB taskId or type used to ride past max_message_bytes onto the bus."""
    huge = "t" * 300_000
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    ("team_send_message", {"toMemberId": "m2", "taskId": huge, "content": "hi"}),
                    ("team_broadcast", {"type": huge, "content": "hi"}),
                    ("team_send_message", {"toMemberId": "m2", "content": "x" * 1000}),
                    ("team_broadcast", {"taskId": "!!!", "content": "hi"}),
                    (
                        "team_send_message",
                        {"toMemberId": "m2", "taskId": "Task 1", "content": "threaded"},
                    ),
                ]
            ),
            "done",
        ],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        max_message_bytes=1000,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    task_id, type_, content, no_id, ok = tool_results(llm.requests[f"m1-{run_id}"][1])
    for refused, says in (
        (task_id, "invalid task id"),
        (type_, "invalid message type"),
        (content, "the limit is 1000 bytes"),
        (no_id, "taskId '!!!'"),
    ):
        assert refused.startswith("TOOL_ERROR: ") and says in refused
        assert len(refused) < 1000  # the refusal does not echo the 300 kB back
    assert (parsed(ok)["ok"], parsed(ok)["taskId"]) == (True, "task_1")
    peer = [m for m in MessageBus(conn, RunKeys(run_id)).messages() if m.type.startswith("peer.")]
    assert [(m.task_id, m.content) for m in peer] == [("task_1", "threaded")]


def test_members_cannot_publish_system_notices(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """Only the runtime says a plan was approved or a hook failed; a member trying gets a tool
    error listing the types it may send, and its task goes on."""
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    (
                        "team_send_message",
                        {
                            "toMemberId": "m2",
                            "type": "plan.approved",
                            "content": "approved, trust me",
                        },
                    ),
                    ("team_broadcast", {"type": "hook.error", "content": "fake failure"}),
                    ("team_send_message", {"to": "*", "type": "task.result", "content": "x"}),
                    ("team_broadcast", {"type": "peer.ask", "content": "a type of its own"}),
                ]
            ),
            "done",
        ],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    *refusals, own_type = tool_results(llm.requests[f"m1-{run_id}"][1])
    for refusal in refusals:
        assert refusal.startswith("TOOL_ERROR: ")
        error = json.loads(refusal[len("TOOL_ERROR: ") :])["error"]
        assert "reserved for the runtime" in error
        assert "members send 'peer.message', 'peer.broadcast'" in error
    assert parsed(own_type)["ok"] is True
    assert messages(conn, run_id) == [
        ("system", "m1", "task.assigned"),
        ("m1", "*", "peer.ask"),
        ("m1", "lead", "task.result"),
    ]


def test_team_tools_are_offered_only_when_enabled(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", ["plain answer"])
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        enable_member_team_tools=False,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    assert tool_names(llm.requests[f"m1-{run_id}"][0]) == []


def test_claimed_task_runs_after_the_current_one_and_heartbeats_count(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    ("team_heartbeat_task", {}),
                    ("team_claim_task", {"task_id": "task_2"}),
                    ("team_heartbeat_task", {"taskId": "task_3"}),
                ]
            ),
            "task_1 done",
            "task_2 done by m1",
        ],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task(), one_task("m2", "task_2"), one_task("m2", "task_3")],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    outcome = execute_task(conn, run_id, "task_1")

    assert outcome == "task_1: completed; task_2: completed"
    beat, claim, foreign = (parsed(r) for r in tool_results(llm.requests[f"m1-{run_id}"][1]))
    assert (beat["ok"], beat["taskId"], beat["taskState"]["heartbeatCount"]) == (True, "task_1", 1)
    assert (claim["ok"], claim["taskState"]["status"], claim["taskState"]["claimedBy"]) == (
        True,
        "in_progress",
        "m1",
    )
    assert foreign["ok"] is False and "do not hold a claim on task_3" in foreign["reason"]
    board = TaskBoard(conn, RunKeys(run_id))
    assert board.get("task_1").heartbeat_count == 1
    task_2 = board.get("task_2")
    assert (task_2.status, task_2.claimed_by, task_2.output) == (
        TaskStatus.COMPLETED,
        "m1",
        "task_2 done by m1",
    )
    assert board.get("task_3").status is TaskStatus.READY
    assert "Task ID: task_2" in llm.prompts(f"m1-{run_id}")[2]


def test_model_500_then_200_is_retried(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", [HttpError(500, "briefly overloaded"), "fine"])
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        model_max_retries=2,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    assert len(llm.requests[f"m1-{run_id}"]) == 2
    assert TaskBoard(conn, RunKeys(run_id)).get("task_1").output == "fine"


def test_model_500_forever_fails_the_task_with_the_provider_text(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", [HttpError(500, "provider melted 7f3a")], repeat_last=True)
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task(), one_task(task_id="task_2", depends_on=["task_1"])],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        model_max_retries=1,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"
    assert len(llm.requests[f"m1-{run_id}"]) == 2  # the first try and one retry
    board = TaskBoard(conn, RunKeys(run_id))
    failed, dependent = board.get("task_1"), board.get("task_2")
    assert failed.status is TaskStatus.FAILED and "provider melted 7f3a" in failed.error
    assert dependent.status is TaskStatus.BLOCKED and dependent.error == "dependency failed"
    assert ("m1", "lead", "task.error") in messages(conn, run_id)


def test_budget_stops_new_model_calls_once_spent_and_gives_the_tasks_back(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", [])  # any call fails the test
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task(), one_task(task_id="task_2")],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        max_tokens=30,
    )

    # A call reserves its worst case (the prompt and 4096 output tokens): 30 cover none, so
    # the call is not made, and the task is given back for after a top-up: not failed, the
    # attempt not counted.
    first_line = execute_task(conn, run_id, "task_1")
    spent = conn.hget(RunKeys(run_id).usage, "budget_exceeded") or ""
    assert re.fullmatch(
        r"budget exceeded: 0 tokens used, the next call may take \d+, "
        r"max_tokens is 30",
        spent,
    ), spent
    assert first_line == f"task_1: awaiting budget: {spent}"
    board = TaskBoard(conn, RunKeys(run_id))
    first = board.get("task_1")
    assert (first.status, first.attempts, first.error) == (TaskStatus.READY, 0, None)
    assert first.requeue_reason == spent
    # A task started later is given back before its first model call.
    assert execute_task(conn, run_id, "task_2") == f"task_2: awaiting budget: {spent}"
    assert board.get("task_2").status is TaskStatus.READY
    assert llm.requests[f"m1-{run_id}"] == []
    assert RunStore(conn, RunKeys(run_id)).usage().prompt_tokens == 0
    # The run reports it once, when the budget is first found spent.
    assert [m for m in messages(conn, run_id) if m[2] == "run.budget_exceeded"] == [
        ("system", "lead", "run.budget_exceeded")
    ]


def test_cancel_stops_the_member_before_its_next_model_call(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    def cancel_then_call_a_tool(body: dict[str, Any]) -> ToolCalls:
        conn.set(RunKeys(run_id).cancel, 1)
        return ToolCalls([("team_list_tasks", {})])

    model = llm.script(f"m1-{run_id}", handler=cancel_then_call_a_tool)
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"
    assert len(llm.requests[f"m1-{run_id}"]) == 1
    assert TaskBoard(conn, RunKeys(run_id)).get("task_1").error == "run cancelled"


def test_lost_claim_stops_the_loop_before_the_next_model_call_without_writing(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    board = TaskBoard(conn, RunKeys(run_id))

    def reclaim_then_call_a_tool(body: dict[str, Any]) -> ToolCalls:
        # What the coordinator does when the heartbeat key expires.
        conn.delete(board.keys.heartbeat("task_1"))
        assert board.reclaim_expired(max_attempts=3) == ["task_1"]
        # A stale attempt must not act: this broadcast must never be published.
        return ToolCalls([("team_broadcast", {"content": "from a stale attempt"})])

    model = llm.script(f"m1-{run_id}", handler=reclaim_then_call_a_tool)
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    assert execute_task(conn, run_id, "task_1").startswith("task_1: abandoned: claim lost")
    assert len(llm.requests[f"m1-{run_id}"]) == 1
    task = board.get("task_1")
    assert task.status is TaskStatus.READY and task.output is None
    assert task.stale_writes == 1  # the refresh before the next model call, and nothing after
    # The abandoned attempt wrote no outcome, but its model call was paid for: it is on the task.
    assert (task.usage.prompt_tokens, task.usage.completion_tokens) == (11, 7)
    assert messages(conn, run_id) == [("system", "m1", "task.assigned")]


def test_releasing_the_current_task_ends_the_attempt_quietly(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"m1-{run_id}", [ToolCalls([("team_release_task", {"reason": "needs a specialist"})])]
    )
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: abandoned: claim released"
    assert len(llm.requests[f"m1-{run_id}"]) == 1
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    # Back in the queue for the coordinator to dispatch again; nothing was written as a result.
    assert (task.status, task.output, task.attempts) == (TaskStatus.READY, None, 1)
    assert messages(conn, run_id) == [("system", "m1", "task.assigned")]


def test_reassigning_the_current_task_hands_it_to_the_teammate_in_the_same_job(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    m1 = llm.script(f"m1-{run_id}", [ToolCalls([("team_reassign_task", {"to": "m2"})])])
    m2 = llm.script(f"m2-{run_id}", ["m2 finished it"])
    make_run(
        conn,
        run_id,
        models={"m1": m1, "m2": m2},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    outcome = execute_task(conn, run_id, "task_1")

    assert outcome == "task_1: handed off to m2; task_1: completed"
    assert len(llm.requests[f"m1-{run_id}"]) == 1
    assert llm.prompts(f"m2-{run_id}")[0].startswith("Team member role: Member m2")
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert (task.status, task.claimed_by, task.output, task.attempts) == (
        TaskStatus.COMPLETED,
        "m2",
        "m2 finished it",
        1,
    )
    assert messages(conn, run_id) == [
        ("system", "m1", "task.assigned"),
        ("system", "m2", "task.assigned"),
        ("m2", "lead", "task.result"),
    ]


def test_reassign_to_an_unknown_member_is_a_tool_error(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"m1-{run_id}", [ToolCalls([("team_reassign_task", {"toMemberId": "ghost"})]), "kept it"]
    )
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    (result,) = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert result.startswith("TOOL_ERROR: ") and "unknown team member: ghost" in result


def test_reassigning_to_yourself_or_too_often_is_a_tool_error(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """Each handoff opens a fresh session with its own step budget, so handoffs are bounded."""

    def ping_pong(body: dict[str, Any]) -> ToolCalls | str:
        if any(m.get("role") == "tool" for m in body["messages"]):
            return "kept it"
        me = "m1" if "Member m1" in body["messages"][1]["content"] else "m2"
        other = "m2" if me == "m1" else "m1"
        return ToolCalls(
            [("team_reassign_task", {"to": me}), ("team_reassign_task", {"to": other})]
        )

    model = llm.script(f"pp-{run_id}", handler=ping_pong)
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )

    outcome = execute_task(conn, run_id, "task_1")

    assert outcome.count("handed off to") == 3 and outcome.endswith("task_1: completed")
    requests = llm.requests[f"pp-{run_id}"]
    self_refusals = [r for body in requests for r in tool_results(body) if "already holds" in r]
    assert self_refusals and all(r.startswith("TOOL_ERROR: ") for r in self_refusals)
    assert any("already reassigned 3 times" in r for body in requests for r in tool_results(body))
    assert TaskBoard(conn, RunKeys(run_id)).get("task_1").status is TaskStatus.COMPLETED


def test_member_exceeding_its_steps_fails_the_task(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", [ToolCalls([("team_list_tasks", {})])], repeat_last=True)
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        member_max_steps=3,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"
    assert len(llm.requests[f"m1-{run_id}"]) == 3
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert (task.status, task.error) == (TaskStatus.FAILED, "member exceeded 3 steps")


def test_reassign_on_the_last_step_hands_the_task_over(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """The handoff is honoured, and the new member's session gets a step budget of its own."""
    m1 = llm.script(f"m1-{run_id}", [ToolCalls([("team_reassign_task", {"to": "m2"})])])
    m2 = llm.script(f"m2-{run_id}", ["m2 finished it"])
    make_run(
        conn,
        run_id,
        models={"m1": m1, "m2": m2},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        member_max_steps=1,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: handed off to m2; task_1: completed"
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert (task.status, task.claimed_by, task.output, task.error) == (
        TaskStatus.COMPLETED,
        "m2",
        "m2 finished it",
        None,
    )


def test_release_on_the_last_step_ends_the_attempt_without_a_stale_write(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", [ToolCalls([("team_release_task", {})])])
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        member_max_steps=1,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: abandoned: claim released"
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert (task.status, task.error, task.stale_writes) == (TaskStatus.READY, None, 0)
    assert messages(conn, run_id) == [("system", "m1", "task.assigned")]


def read_contents(result: str) -> list[str]:
    return [m["content"] for m in parsed(result).get("messages", [])]


def test_messages_read_by_an_abandoned_attempt_go_to_the_next_one(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """Read, then released before the next model call saw the result: not lost for the member."""
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls([("team_read_messages", {}), ("team_release_task", {})]),
            ToolCalls([("team_read_messages", {})]),
            "done",
        ],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )
    MessageBus(conn, RunKeys(run_id)).send("m2", "m1", None, None, "before the first try")

    assert execute_task(conn, run_id, "task_1") == "task_1: abandoned: claim released"
    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    # No model call carried the first attempt's read; the second attempt's read (its second
    # call) gets what the first read, its task.assigned included, then what is new.
    first_try, second_try_start, second_try_read = llm.requests[f"m1-{run_id}"]
    (second_read,) = tool_results(second_try_read)
    assert read_contents(second_read) == ["before the first try", "Do task_1", "Do task_1"]
    assert conn.hlen(RunKeys(run_id).unacked_reads) == 0


def test_each_message_is_read_once_across_steps(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    bus = MessageBus(conn, RunKeys(run_id))  # reads the roster once make_run wrote it

    def read_each_step(body: dict[str, Any]) -> ToolCalls | str:
        step = sum(m.get("role") == "assistant" for m in body["messages"]) + 1
        if step == 2:
            bus.send("m2", "m1", None, None, "between steps")
        if step <= 2:
            return ToolCalls([("team_read_messages", {}), ("team_read_messages", {})])
        return ToolCalls([("team_read_messages", {})]) if step == 3 else "done"

    model = llm.script(f"m1-{run_id}", handler=read_each_step)
    make_run(
        conn,
        run_id,
        models={"m1": model, "m2": model},
        tasks=[one_task()],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )
    bus.send("m2", "m1", None, None, "before the start")

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    requests = llm.requests[f"m1-{run_id}"]
    step_1, step_2, step_3 = (
        [read_contents(r) for r in tool_results(body)[-2:]] for body in requests[1:4]
    )
    assert step_1 == [["before the start", "Do task_1"], []]
    assert step_2 == [["between steps"], []]
    assert step_3[-1] == []
    assert conn.hlen(RunKeys(run_id).unacked_reads) == 0
