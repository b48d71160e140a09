"""The offline model's moves, decided from a conversation alone: what it calls, with which
arguments, and that it never makes the same call twice (so no loop, even when a call fails)."""

from __future__ import annotations

import json
from typing import Any

from teamctl.shared.agent.offline_actions import Act, example_args, tool_calls
from teamctl.shared.agent.offline_model import LEAD_MARK, PLAIN, TEAMMATE_MARK, act


def tool(tool_name: str, /, **properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        },
    }


TEXT = {"type": "string"}
LEAD_TOOLS = [
    tool("list_teammates"),
    tool("spawn_teammate", name=TEXT, role=TEXT, prompt=TEXT),
    tool("create_task", subject=TEXT),
    tool("request_shutdown", name=TEXT),
    tool("send_message", to=TEXT, content=TEXT),
]
TEAMMATE_TOOLS = [
    tool("send_message", to=TEXT, content=TEXT),
    tool("complete_task", task_id=TEXT, result=TEXT),
    tool("respond_shutdown", request_id=TEXT, approve={"type": "boolean"}),
    tool("submit_plan", plan=TEXT),
]


def answered(
    messages: list[dict[str, Any]], reply: Act, results: list[Any]
) -> list[dict[str, Any]]:
    """The conversation after `reply`'s calls got `results`."""
    ids = [f"c{len(messages)}_{n}" for n in range(len(reply.calls))]
    calls = [
        {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.args)}}
        for i, c in zip(ids, reply.calls, strict=True)
    ]
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": i, "content": json.dumps(r)}
            for i, r in zip(ids, results, strict=True)
        ),
    ]


def test_arguments_come_from_the_schema_required_ones_only() -> None:
    schema = {
        "type": "object",
        "required": ["q", "n", "mode", "flag", "tags", "limit", "maybe"],
        "properties": {
            "q": TEXT,
            "n": {"type": "integer"},
            "mode": {"enum": ["a", "b"]},
            "flag": {"type": "boolean"},
            "tags": {"type": "array"},
            "limit": {"type": "integer", "default": 5},
            "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "optional": TEXT,
        },
    }
    assert example_args(schema) == {
        "q": "offline demo",
        "n": 1,
        "mode": "a",
        "flag": True,
        "tags": [],
        "limit": 5,
        "maybe": 1,
    }


def test_the_lead_spawns_the_named_teammates_and_reserves_the_listed_tasks_for_them() -> None:
    said = "Spawn two teammates called Ann and bob as a reviewer. tasks: read it; check it"
    messages = [
        {"role": "system", "content": f"{LEAD_MARK}.\nTeam: t"},
        {"role": "user", "content": said},
    ]
    first = act("default", messages, LEAD_TOOLS)
    assert [c.name for c in first.calls] == ["list_teammates"]
    messages = answered(
        messages, first, [{"ok": True, "teammates": [{"name": "bob", "status": "idle"}]}]
    )
    second = act("default", messages, LEAD_TOOLS)
    assert [(c.name, c.args) for c in second.calls] == [
        ("spawn_teammate", {"name": "ann", "role": "reviewer", "prompt": said}),
        ("create_task", {"subject": "read it", "assignee": "ann"}),
        ("create_task", {"subject": "check it", "assignee": "ann"}),
    ]
    messages = answered(
        messages, second, [{"ok": True}, {"ok": True, "task_id": "task_1"}, {"ok": False}]
    )
    assert act("default", messages, LEAD_TOOLS) == Act(
        text="[lead of t] spawned ann; created task_1 (read it); could not create_task check it."
    )


def test_a_teammate_tries_each_move_once_even_when_it_fails() -> None:
    inbox = "\n".join(
        json.dumps(line)
        for line in [
            {
                "id": "1-0",
                "from": "system",
                "type": "task.assigned",
                "content": 'You now hold task_4 ... complete_task(task_id="task_4", result=...)',
            },
            {"id": "2-0", "from": "lead", "type": "peer.message", "content": "Status?"},
            {
                "id": "3-0",
                "from": "lead",
                "type": "shutdown_request",
                "content": "stop",
                "request_id": "req_1",
            },
        ]
    )
    messages = [
        {"role": "system", "content": f"{TEAMMATE_MARK}.\nName: al\nRole: dev\nPlan mode: off"},
        {"role": "user", "content": f"<inbox>\n{inbox}\n</inbox>"},
    ]
    first = act("default", messages, TEAMMATE_TOOLS)
    assert [(c.name, c.args) for c in first.calls] == [
        ("complete_task", {"task_id": "task_4", "result": "[dev] al: did task_4."}),
        ("send_message", {"to": "lead", "content": "[dev] al: got 2-0: Status?"}),
    ]
    messages = answered(messages, first, [{"ok": False}, {"ok": True}])
    second = act("default", messages, TEAMMATE_TOOLS)  # the shutdown last: it ends the turn
    assert [(c.name, c.args["request_id"]) for c in second.calls] == [("respond_shutdown", "req_1")]
    messages = answered(messages, second, [{"ok": True}])
    assert act("default", messages, TEAMMATE_TOOLS).text.startswith("[dev] al: noted")


def test_in_plan_mode_a_teammate_submits_one_plan_and_waits() -> None:
    messages = [
        {
            "role": "system",
            "content": f"{TEAMMATE_MARK}.\nName: al\nRole: dev\n"
            "Plan mode: on: before changing anything",
        },
        {"role": "user", "content": "Start."},
    ]
    first = act("default", messages, TEAMMATE_TOOLS)
    assert [c.name for c in first.calls] == ["submit_plan"]
    messages = answered(messages, first, [{"ok": True}])
    assert act("default", messages, TEAMMATE_TOOLS).calls == []
    # The next turn, still unanswered: no second plan (the store would refuse it).
    messages += [
        {"role": "assistant", "content": "waiting"},
        {"role": "user", "content": '<inbox>\n{"id": "4-0"}\n</inbox>'},
    ]
    assert act("default", messages, TEAMMATE_TOOLS).calls == []


def test_a_role_is_read_after_who_when_no_as_names_one() -> None:
    said = "Spawn a teammate called carol who reviews code."
    messages = [
        {"role": "system", "content": f"{LEAD_MARK}.\nTeam: t"},
        {"role": "user", "content": said},
    ]
    messages = answered(messages, act("default", messages, LEAD_TOOLS), [{"teammates": []}])
    [spawn] = act("default", messages, LEAD_TOOLS).calls
    assert spawn.args == {"name": "carol", "role": "reviews code", "prompt": said}


def test_the_plain_model_never_calls_a_tool() -> None:
    messages = [
        {"role": "system", "content": f"{LEAD_MARK}.\nTeam: t"},
        {"role": "user", "content": "Spawn a teammate called carol"},
    ]
    assert act(PLAIN, messages, LEAD_TOOLS).calls == []


def lead_calls(said: str, known: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The lead's calls for `said` once list_teammates answered `known`."""
    messages = [
        {"role": "system", "content": f"{LEAD_MARK}.\nTeam: t"},
        {"role": "user", "content": said},
    ]
    messages = answered(
        messages,
        act("default", messages, LEAD_TOOLS),
        [{"teammates": [{"name": name, "status": "idle"} for name in known]}],
    )
    return [(c.name, c.args) for c in act("default", messages, LEAD_TOOLS).calls]


def test_the_lead_reads_only_what_a_request_names() -> None:
    assert lead_calls("tell alice: stop using tabs", ["alice", "bob"]) == [
        ("send_message", {"to": "alice", "content": "stop using tabs"})
    ]
    said = "Shut down carol once all tasks are done"
    assert lead_calls(said, ["carol", "bob"]) == [
        ("request_shutdown", {"name": "carol", "reason": said})
    ]
    assert [n for n, _ in lead_calls("Ask bob to shut down.", ["bob", "carol"])] == [
        "request_shutdown"
    ]
    assert [a["name"] for _, a in lead_calls("Shut down everyone.", ["bob", "carol"])] == [
        "bob",
        "carol",
    ]
    assert [
        (n, a["name"]) for n, a in lead_calls("Spawn a teammate called carol, who reviews code", [])
    ] == [("spawn_teammate", "carol")]
    assert [
        (n, a["name"]) for n, a in lead_calls("Spawn one called carol and have her draft it", [])
    ] == [("spawn_teammate", "carol")]
    assert lead_calls("tell alice: the module named utils is slow", ["alice"]) == [
        ("send_message", {"to": "alice", "content": "the module named utils is slow"})
    ]


def test_a_teammate_completes_exactly_the_tasks_it_holds() -> None:
    assigned = {
        "id": "1-0",
        "from": "system",
        "type": "task.assigned",
        "content": "You now hold task_1 from the team task board: review task_10's output",
    }
    messages = [
        {"role": "system", "content": f"{TEAMMATE_MARK}.\nName: al\nRole: dev\nPlan mode: off"},
        {"role": "user", "content": f"<inbox>\n{json.dumps(assigned)}\n</inbox>"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "x",
                    "type": "function",
                    "function": {
                        "name": "complete_task",
                        "arguments": '{"task_id": "task_10", "result": "r"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": "not json"},
    ]
    [call] = act("default", messages, TEAMMATE_TOOLS).calls
    assert (call.name, call.args["task_id"]) == ("complete_task", "task_1")


def test_malformed_calls_in_memory_neither_crash_nor_repeat_ids() -> None:
    messages = [
        {"role": "system", "content": f"{TEAMMATE_MARK}.\nName: al\nRole: dev\nPlan mode: off"},
        {"role": "user", "content": [{"type": "text", "text": "Start."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "offline_7"},
                {"id": "y", "function": {"name": "x", "arguments": "[1]"}},
                {"id": "z", "function": {"name": "x", "arguments": {"a": 1}}},
            ],
        },
    ]
    reply = act("default", messages, [*TEAMMATE_TOOLS, tool("lookup", q=TEXT)])
    assert [c.name for c in reply.calls] == ["lookup"]
    [made] = tool_calls(reply, messages)
    assert made["id"] == "offline_8"


def test_a_member_that_may_write_files_writes_its_answer_once() -> None:
    tools = [tool("team_list_tasks"), tool("write_file", path=TEXT, content=TEXT)]
    messages = [
        {"role": "system", "content": "You are m1."},
        {"role": "user", "content": "Task ID: t1\nTask: say hello"},
    ]
    first = act("default", messages, tools)
    assert [c.name for c in first.calls] == ["team_list_tasks", "write_file"]
    written = first.calls[1].args
    assert written["path"] == "notes/t1.md" and written["content"].endswith("\n")
    then = act("default", answered(messages, first, [{"tasks": []}, {"ok": True}]), tools)
    assert not then.calls and then.text is not None
    assert written["content"] == then.text + "\n"
