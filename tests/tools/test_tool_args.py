"""Tool arguments are pydantic models: the schema the model sees is generated from them (AI4J's
table for the team tools), and every argument takes its schema name and its snake_case spelling,
read as AI4J's firstString. Real Redis behind the team tools."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis
from pydantic.alias_generators import to_snake
from teamctl.shared.agent.python_tools import ToolContext, add_python_tools
from teamctl.shared.agent.tool_names import WORKSPACE_TOOLS
from teamctl.shared.agent.tools import InvalidArguments, Toolbox, precompute_schemas
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.text import ECHO_CHARS
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.tools import add_workspace_tools
from teamctl.worker.runs.claims import Claim, Claims
from teamctl.worker.runs.mailbox import Mailbox
from teamctl.worker.runs.member_tools import MemberToolContext, add_member_tools

from tests.support.runs import make_run

AI4J_TEAM_TOOLS = {  # name: (properties in order, required), AI4J's registry table
    "team_send_message": (["toMemberId", "content", "type", "taskId"], ["toMemberId", "content"]),
    "team_broadcast": (["content", "type", "taskId"], ["content"]),
    "team_read_messages": ([], []),
    "team_list_tasks": (["status", "offset", "limit"], []),  # teamctl's paging, optional
    "team_claim_task": (["taskId"], ["taskId"]),
    "team_release_task": (["taskId", "reason"], ["taskId"]),
    "team_reassign_task": (["taskId", "toMemberId"], ["taskId", "toMemberId"]),
    "team_heartbeat_task": (["taskId"], ["taskId"]),
}
WORKSPACE_SCHEMAS = {
    "read_file": (["path"], ["path"]),
    "write_file": (["path", "content"], ["path", "content"]),
    "edit_file": (["path", "oldText", "newText"], ["path", "oldText", "newText"]),
    "list_files": (["path"], []),
    "bash": (["command"], ["command"]),
}


@pytest.fixture
def toolbox(conn: redis.Redis, run_id: str, tmp_path: Path) -> Toolbox:
    """Every tool a member can have, as m1 executing task_1 (task_2 ready)."""
    tasks = [
        TaskSpec(id="task_1", member_id="m1", task="first"),
        TaskSpec(id="task_2", member_id="m2", task="second"),
    ]
    make_run(
        conn,
        run_id,
        models={"m1": "m", "m2": "m"},
        tasks=tasks,
        workspace=tmp_path / "ws",
        api_base="http://127.0.0.1:9",
    )
    run = RunHandle(conn, run_id)
    board, bus = run.board, run.bus
    token = board.claim("task_1", "m1", "test-worker", 60)
    assert token is not None
    claim, claims = Claim("task_1", token, "m1"), Claims()
    claims.add(claim)
    tools = Toolbox()
    add_workspace_tools(tools, Workspace(tmp_path / "ws"), list(WORKSPACE_TOOLS))
    add_member_tools(
        tools,
        MemberToolContext(
            board=board,
            bus=bus,
            member_ids=["m1", "m2"],
            member_id="m1",
            claim=claim,
            claims=claims,
            worker="test-worker",
            heartbeat_ttl_s=60,
            mailbox=Mailbox(bus, "m1", claim),
        ),
    )
    return tools


def parameters(toolbox: Toolbox) -> dict[str, dict]:
    return {s["function"]["name"]: s["function"]["parameters"] for s in toolbox.schemas()}


def test_the_schemas_are_the_registry_tables(toolbox: Toolbox) -> None:
    schemas = parameters(toolbox)
    assert list(schemas) == [*WORKSPACE_SCHEMAS, *AI4J_TEAM_TOOLS]
    for name, (properties, required) in {**WORKSPACE_SCHEMAS, **AI4J_TEAM_TOOLS}.items():
        schema = schemas[name]
        assert (schema["type"], list(schema["properties"]), schema["required"]) == (
            "object",
            properties,
            required,
        ), name
        for prop in schema["properties"].values():  # a described string, nothing else
            assert set(prop) == {"type", "description"} and prop["type"] == "string"
            assert prop["description"].strip()
    assert schemas["team_send_message"]["properties"]["taskId"]["description"] == (
        "The task id (default: the task you are executing)."
    )


def test_schemas_are_generated_once_and_each_caller_gets_its_own_copy(toolbox: Toolbox) -> None:
    precompute_schemas()  # what a preloading worker parent does: its jobs reuse the result
    first = parameters(toolbox)
    first["bash"]["properties"]["command"]["description"] = "changed by a caller"
    first["bash"]["required"].clear()

    again = parameters(toolbox)
    assert again["bash"]["required"] == ["command"]
    assert again["bash"]["properties"]["command"]["description"] != "changed by a caller"


def test_every_argument_takes_its_schema_name_and_its_snake_case_spelling(toolbox: Toolbox) -> None:
    checked = 0
    for name, schema in parameters(toolbox).items():
        filler = {p: "x" for p in schema["required"]}
        for prop in schema["properties"]:
            others = {p: v for p, v in filler.items() if p != prop}
            camel = toolbox.arguments(name, json.dumps({**others, prop: "v 1"}))
            snake = toolbox.arguments(name, json.dumps({**others, to_snake(prop): "v 1"}))
            assert snake == camel, (name, prop)
            assert "v 1" in camel.model_dump().values(), (name, prop)
            checked += prop != to_snake(prop)
    assert checked == 10  # oldText, newText, toMemberId twice, taskId in six tools


def test_snake_case_arguments_work_end_to_end(
    toolbox: Toolbox, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    sent = json.loads(
        toolbox.call(
            "team_send_message",
            json.dumps({"to_member_id": "m2", "task_id": "Task 1", "content": "snake"}),
        )
    )
    assert (sent["ok"], sent["toMemberId"], sent["taskId"]) == (True, "m2", "task_1")
    (message,) = [m for m in RunHandle(conn, run_id).bus.messages() if m.content == "snake"]
    assert (message.from_, message.to, message.type, message.task_id) == (
        "m1",
        "m2",
        "peer.message",
        "task_1",
    )
    claimed = json.loads(toolbox.call("team_claim_task", '{"task_id": "task_2"}'))
    assert (claimed["ok"], claimed["taskState"]["status"]) == (True, "in_progress")
    written = json.loads(toolbox.call("write_file", '{"file_path": "a.txt", "text": "one"}'))
    assert (written["path"], written["bytes"]) == ("a.txt", 3)
    edited = json.loads(
        toolbox.call(
            "edit_file", json.dumps({"file_path": "a.txt", "old_text": "one", "new_text": "two"})
        )
    )
    assert edited["ok"] and (tmp_path / "ws" / "a.txt").read_text() == "two"


def test_arguments_are_read_as_ai4j_first_string(toolbox: Toolbox) -> None:
    """A blank or non-text value falls through to the next alias; numbers become text; a left
    out taskId is the task being executed, though the schema lists it as required."""
    sent = json.loads(
        toolbox.call(
            "team_send_message",
            json.dumps({"toMemberId": "  ", "to_member_id": {"id": "m2"}, "to": " m2 ", "text": 7}),
        )
    )
    assert (sent["ok"], sent["toMemberId"], sent["taskId"]) == (True, "m2", "task_1")
    beat = json.loads(toolbox.call("team_heartbeat_task", ""))
    assert (beat["ok"], beat["taskId"], beat["taskState"]["heartbeatCount"]) == (True, "task_1", 1)
    released = json.loads(toolbox.call("team_release_task", '{"taskId": " ", "message": "later"}'))
    assert (released["ok"], released["taskState"]["status"]) == (True, TaskStatus.READY)
    listed = json.loads(toolbox.call("list_files", '{"path": ""}'))
    assert listed["path"] == "."


def test_argument_errors_name_the_arguments_as_the_schema_does(toolbox: Toolbox) -> None:
    with pytest.raises(InvalidArguments, match="^toMemberId is required$"):
        toolbox.arguments("team_reassign_task", '{"taskId": "task_1", "to": ""}')
    with pytest.raises(InvalidArguments, match="^content must be a string$"):
        toolbox.arguments("write_file", '{"path": "a.txt", "content": null}')
    refused = toolbox.call("edit_file", '{"path": "a.txt"}', "call-7")
    assert refused.startswith("TOOL_ERROR: ")
    assert json.loads(refused[len("TOOL_ERROR: ") :]) == {
        "errorType": "InvalidArguments",
        "error": "oldText is required",
        "tool": "edit_file",
        "callId": "call-7",
    }


def error_of(result: str) -> dict[str, str]:
    assert result.startswith("TOOL_ERROR: "), result
    return json.loads(result[len("TOOL_ERROR: ") :])


HUGE = 1_000_000


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("team_send_message", "x" * HUGE, "invalid tool arguments (not JSON: Expecting value): "),
        (
            "team_send_message",
            json.dumps(["y" * HUGE]),
            "invalid tool arguments (expected a JSON object): ",
        ),
        ("write_file", json.dumps({"path": "p" * HUGE, "content": ""}), "cannot use 'ppp"),
        ("read_file", json.dumps({"path": "../" + "q" * HUGE}), "path '../qqq"),
        (
            "team_send_message",
            json.dumps({"toMemberId": "z" * HUGE, "content": "hi"}),
            "unknown team member: zzz",
        ),
        (
            "edit_file",
            json.dumps({"path": "p" * 10, "oldText": 1, "k" * HUGE: 1}),
            "oldText must be a string",
        ),
    ],
)
def test_model_text_in_an_error_is_cut(
    toolbox: Toolbox, tool: str, arguments: str, says: str
) -> None:
    """Whatever a model sends (raw arguments, a path, a member's name), the error it gets
    back quotes at most ECHO_CHARS of it and says how long it was."""
    error = error_of(toolbox.call(tool, arguments, "call-1"))
    assert error["error"].startswith(says)
    assert len(error["error"]) < ECHO_CHARS + 300, error["error"][:400]
    assert ("characters]" in error["error"]) is (tool != "edit_file")


def test_an_unknown_tool_and_a_call_id_are_echoed_cut(toolbox: Toolbox) -> None:
    error = error_of(toolbox.call("t" * HUGE, "{}", "c" * HUGE))
    assert error["errorType"] == "UnknownTool"
    assert error["error"].startswith("Unknown tool 'ttt") and len(error["error"]) < 1000
    assert error["tool"] == "t" * ECHO_CHARS + f"...[{HUGE} characters]"
    assert error["callId"] == "c" * ECHO_CHARS + f"...[{HUGE} characters]"


def test_many_argument_errors_are_capped_as_a_whole() -> None:
    """Each unknown key of a Python tool (extra="forbid") is a clause: their sum is capped."""
    tools = Toolbox()
    add_python_tools(
        tools,
        ["tests.pytools_fixture.tools:search_docs"],
        ToolContext(member_id="m1", workspace=Path("."), heartbeat=lambda: True),
        1000,
        timeout_s=5,
    )
    arguments = json.dumps({f"k{n}" + "x" * 150: 1 for n in range(1000)})
    result = tools.call("search_docs", arguments)
    error = error_of(result)["error"]
    assert error.startswith("query is required; k0xxx")
    kept = int(re.search(r"characters; the first (\d+) are shown\]$", error).group(1))
    assert kept > 19_000 and len(result) <= tools.max_result_chars
