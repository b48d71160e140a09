"""Talking to a live run from outside: `teamctl send`, `tasks --follow` and `events`."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.advice import for_this_shell
from teamctl.coordinator.cli import main
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.envelopes import PeerMessage, SystemType
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.output import RUN_EVENTS, MessageEvent, TaskChange
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.task_records import EventKind, TaskEvent, TaskSpec

from tests.support.cli import TEAMCTL, shown_at
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import member_answer, script_run, task_id_of
from tests.support.runs import store_run
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until

MEMBERS = ["m1", "m2", "m3"]
NOTE = "Focus on exactly-once delivery"
RUN_DEADLINE_S = 90
READ_MESSAGES = ToolCalls([("team_read_messages", {})])
"""A member turn that keeps the member working, checking its mailbox at every step."""


def invoke(redis_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", redis_url])


def reads_until_told(told: threading.Event, task_id: str) -> Any:
    """A member handler: `task_id` reads its mailbox until a request carries NOTE (then answers
    and sets `told`); other tasks answer at once."""

    def handler(body: dict[str, Any]) -> Any:
        if task_id_of(body) != task_id:
            return member_answer(body)
        if NOTE in json.dumps(body["messages"]):
            told.set()
            return member_answer(body)
        return READ_MESSAGES

    return handler


def json_lines(text: str) -> list[Any]:
    """Every line parsed as a RunEvent (a line that is not one fails the test)."""
    return [RUN_EVENTS.validate_json(line) for line in text.splitlines()]


def stream_history(conn: redis.Redis, run_id: str) -> tuple[list[TaskEvent], list[str]]:
    """The run's task events (run.* wake-ups left out) and its bus message ids, from Redis."""
    keys = RunKeys(run_id)
    events = [
        TaskEvent.model_validate({"id": eid, **fields}) for eid, fields in conn.xrange(keys.events)
    ]
    return [e for e in events if e.task_id], [eid for eid, _ in conn.xrange(keys.bus)]


def assert_merged_in_time_order(lines: list[dict[str, Any]]) -> None:
    """Task changes and messages interleave by the time Redis gave their stream entries (ties
    within a millisecond: the task change first)."""

    def order(line: dict[str, Any]) -> tuple[int, int]:
        entry_id = line["id"] if line["kind"] == "task" else line["message"]["id"]
        ms = int(entry_id.partition("-")[0])
        return ms, 0 if line["kind"] == "task" else 1

    assert [order(line) for line in lines] == sorted(order(line) for line in lines)


@pytest.mark.realistic
def test_send_reaches_a_busy_member_and_the_followers_see_every_change(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    told = threading.Event()
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan, member=reads_until_told(told, "a"))
    team = team_file(tmp_path / "t.toml", models, options={"member_max_steps": 100_000})
    run = subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    followers: list[subprocess.Popen[str]] = []
    try:
        wait_until(lambda: RunStore(conn, RunKeys(run_id)).exists(), 30, message="the run")
        followers = [
            subprocess.Popen(
                [*TEAMCTL, *verb, run_id, "--redis-url", workers, "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for verb in (["events"], ["tasks", "--follow"])
        ]
        board = TaskBoard(conn, RunKeys(run_id))
        member_model = models["member"].removeprefix("openai/")
        wait_until(
            lambda: len(llm.requests.get(member_model, [])) >= 2,
            RUN_DEADLINE_S,
            message="m1 busy reading its mailbox",
        )
        requests_before = len(llm.requests[member_model])

        sent = invoke(workers, "send", run_id, "--to", "m1", NOTE)

        assert (sent.exit_code, sent.stdout) == (0, "sent to m1\n"), sent.output
        assert told.wait(RUN_DEADLINE_S), "m1's model never saw the message"
        assert run.wait(RUN_DEADLINE_S) == 0, run.stderr.read() if run.stderr else ""
        outputs = [f.communicate(timeout=30) for f in followers]
    finally:
        for process in [run, *followers]:
            if process.poll() is None:
                process.kill()
                process.wait(10)

    # The message reached m1's model as the result of a mailbox read made after it was sent.
    carrying = [
        i
        for i, body in enumerate(llm.requests[member_model])
        if task_id_of(body) == "a" and NOTE in json.dumps(body["messages"])
    ]
    assert carrying and carrying[0] >= requests_before
    first = llm.requests[member_model][carrying[0]]["messages"]
    tool_results = [m for m in first if m.get("role") == "tool" and NOTE in str(m["content"])]
    assert tool_results and '"from": "lead"' in tool_results[0]["content"].replace('":"', '": "')
    assert board.get("a").status.value == "completed"

    # `events --json` printed every task change and every message, in order, then exited 0.
    events_out, tasks_out = (out for out, _ in outputs)
    assert [f.returncode for f in followers] == [0, 0], [err for _, err in outputs]
    live = json_lines(events_out)
    task_events, message_ids = stream_history(conn, run_id)
    messages = [m.message for m in live if isinstance(m, MessageEvent)]
    assert [m.id for m in messages] == message_ids
    [sent_line] = [m for m in messages if m.from_ == "lead"]
    assert isinstance(sent_line, PeerMessage)
    assert (sent_line.from_, sent_line.to, sent_line.type, sent_line.content) == (
        "lead",
        "m1",
        "peer.message",
        NOTE,
    )
    changes = [c for c in live if isinstance(c, TaskChange)]
    assert [(c.task_id, c.status) for c in changes] == [
        ("a", EventKind.CREATED),
        ("b", EventKind.CREATED),
        *((e.task_id, e.status) for e in task_events),
    ]
    assert [(c.task_id, c.status.value, c.member_id, c.attempts) for c in changes[2:]] == [
        ("a", "in_progress", "m1", 1),
        ("a", "completed", "m1", 1),
        ("b", "in_progress", "m2", 1),
        ("b", "completed", "m2", 1),
    ]
    assert isinstance(live[-1], MessageEvent)
    assert live[-1].message.type is SystemType.RUN_COMPLETE
    assert_merged_in_time_order([json.loads(line) for line in events_out.splitlines()])
    # ...and the same lines again, at once, once the run has ended.
    again = invoke(workers, "events", run_id, "--json")
    assert again.exit_code == 0 and again.stdout == events_out

    # `tasks --follow --json`: the board first, then each later change, in order.
    followed = [TaskChange.model_validate_json(line) for line in tasks_out.splitlines()]
    board_lines = [c for c in followed if c.id is None]
    assert followed[: len(board_lines)] == board_lines
    later = [(c.task_id, c.status) for c in followed[len(board_lines) :]]
    history = [(c.task_id, c.status) for c in changes]
    assert later == history[len(history) - len(later) :]
    last = {c.task_id: c.status.value for c in followed}
    assert last == {"a": "completed", "b": "completed"}


def test_a_sent_message_is_in_the_members_next_dispatch_input(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """m2 is sent a note while a is running; b, m2's next task, starts with it in its input."""
    sent = threading.Event()

    def handler(body: dict[str, Any]) -> Any:
        if task_id_of(body) == "a" and not sent.is_set():
            return ToolCalls([("team_list_tasks", {})])  # a runs until the note is sent
        return member_answer(body)

    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan, member=handler)
    team = team_file(tmp_path / "t.toml", models, options={"member_max_steps": 100_000})
    run = subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        board = TaskBoard(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
        wait_until(
            lambda: board.task_ids() and board.get("a").status.value == "in_progress",
            RUN_DEADLINE_S,
            message="task a in progress",
        )
        result = invoke(workers, "send", run_id, "--to", "m2", NOTE)
        assert result.exit_code == 0, result.output
        sent.set()
        assert run.wait(RUN_DEADLINE_S) == 0, run.stderr.read() if run.stderr else ""
    finally:
        sent.set()
        if run.poll() is None:
            run.kill()
            run.wait(10)

    member_model = models["member"].removeprefix("openai/")
    first_of_b = next(body for body in llm.requests[member_model] if task_id_of(body) == "b")
    dispatch_input = first_of_b["messages"][1]["content"]
    assert "Recent team messages:" in dispatch_input
    assert f"- [peer.message] lead -> m2: {NOTE}" in dispatch_input


def test_send_to_everyone_reaches_every_inbox(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    store_run(conn, run_id)
    sent = invoke(redis_url, "send", run_id, "--to", "*", NOTE)
    assert (sent.exit_code, sent.stdout) == (0, "sent to every member\n"), sent.output
    bus = MessageBus(conn, RunKeys(run_id))
    [broadcast] = bus.messages()
    for member in MEMBERS:
        [message] = bus.read_unread(member)
        assert (message.id, message.from_, message.to, message.type, message.content) == (
            broadcast.id,
            "lead",
            "*",
            "peer.broadcast",
            NOTE,
        )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--to", "ghost", NOTE], "unknown team member 'ghost'; send to one of: m1, m2, m3"),
        (["--to", "lead", NOTE], "send to one of: m1, m2, m3"),
        (["--to", "m1", "  "], "the message is empty"),
        (["--to", "m1", "x" * 200], "the limit is 100 bytes"),
    ],
)
def test_a_bad_message_exits_2_with_one_line(
    conn: redis.Redis, redis_url: str, run_id: str, args: list[str], says: str
) -> None:
    store_run(conn, run_id, max_message_bytes=100)
    result = invoke(redis_url, "send", run_id, *args)
    assert result.exit_code == 2 and says in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert MessageBus(conn, RunKeys(run_id)).messages() == []


def test_send_to_a_finished_or_unknown_run_exits_2(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    store = store_run(conn, run_id)
    store.finish(RunEnd(RunStatus.COMPLETED, 3600, output="done"))
    finished = invoke(redis_url, "send", run_id, "--to", "m1", NOTE)
    hint = for_this_shell(redis_url).spell(f"`teamctl status {run_id}`")
    assert finished.exit_code == 2 and hint in finished.stderr
    unknown = invoke(redis_url, "send", "no-such-run", "--to", "m1", NOTE)
    assert unknown.exit_code == 2 and "no run no-such-run" in unknown.stderr
    for result in (finished, unknown):
        assert len(result.stderr.splitlines()) == 1


def test_followers_of_a_finished_run_print_its_history_and_exit(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    store = store_run(conn, run_id)
    board, bus = TaskBoard(conn, RunKeys(run_id)), MessageBus(conn, RunKeys(run_id))
    board.create(
        [
            TaskSpec(id="a", member_id="m1", task="A"),
            TaskSpec(id="b", member_id="m2", task="B", depends_on=["a"]),
        ]
    )
    token = board.claim("a", "m1", "host:1", 30)
    bus.send("m1", "m2", None, "a", "almost there")
    board.complete("a", token, "A done", 5, announce_as="m1")
    board.block_stalled("cancelled")
    store.finish(
        RunEnd(
            RunStatus.CANCELLED,
            3600,
            error="cancelled",
            announce="run.cancelled",
            announce_text="cancelled",
        )
    )

    events = invoke(redis_url, "events", run_id, "--json")
    tasks = invoke(redis_url, "tasks", run_id, "--follow", "--json")
    plain = invoke(redis_url, "events", run_id)

    assert events.exit_code == tasks.exit_code == plain.exit_code == 0
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    assert [(line["task_id"], line["status"]) for line in lines if line["kind"] == "task"] == [
        ("a", "created"),
        ("b", "created"),
        ("a", "in_progress"),
        ("a", "completed"),
        ("b", "blocked"),
    ]
    assert [line["message"]["type"] for line in lines if line["kind"] == "message"] == [
        "peer.message",
        "task.result",
        "run.cancelled",
    ]
    assert_merged_in_time_order(lines)
    lines = [line for line in lines if line["kind"] == "task"] + [
        line for line in lines if line["kind"] == "message"
    ]
    assert set(lines[2]) == {"kind", "id", "task_id", "status", "member_id", "attempts", "at_ms"}
    assert (lines[2]["member_id"], lines[2]["attempts"]) == ("m1", 1)
    # A message line is `kind` and the message as `messages --json` prints it.
    assert set(lines[5]) == {"kind", "message"}
    assert lines[5]["message"] == json.loads(
        invoke(redis_url, "messages", run_id, "--json").stdout.splitlines()[0]
    )
    assert lines[5]["message"]["from"] == "m1"
    assert lines[5]["message"]["content"] == "almost there"
    # The plain lines: each the local time of its change or message, then what happened.
    merged = [json.loads(line) for line in events.stdout.splitlines()]
    assert plain.stdout.splitlines() == [
        f"{shown_at(line['at_ms'])} [task {line['status']}] {line['task_id']} "
        f"{line['member_id'] or '-'} attempts={line['attempts']}"
        if line["kind"] == "task"
        else f"{shown_at(line['message']['created_at'])} [{line['message']['type']}]"
        + (f" ({line['message']['task_id']})" if line["message"]["task_id"] else "")
        + f" {line['message']['from']} -> {line['message']['to'] or '(everyone)'}: "
        f"{line['message']['content']}"
        for line in merged
    ]
    claimed = next(line for line in merged if line.get("status") == "in_progress")
    said = next(line["message"] for line in merged if line["kind"] == "message")
    assert f"{shown_at(claimed['at_ms'])} [task in_progress] a m1 attempts=1" in plain.stdout
    assert (
        f"{shown_at(said['created_at'])} [peer.message] (a) m1 -> m2: almost there\n"
        in plain.stdout
    )
    # tasks --follow prints the board as it stands (nothing changes after it: it returns).
    assert [
        (t["task_id"], t["status"], t["id"]) for t in map(json.loads, tasks.stdout.splitlines())
    ] == [("a", "completed", None), ("b", "blocked", None)]


def test_an_unknown_run_is_a_usage_error_for_the_followers(redis_url: str) -> None:
    for verb in (["events"], ["tasks", "--follow"]):
        result = invoke(redis_url, *verb, "no-such-run")
        assert result.exit_code == 2 and "no run no-such-run" in result.stderr
