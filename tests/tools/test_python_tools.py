"""The team's own Python functions as member tools: a planned run through the CLI
on real workers that import them, the coordinator's check (exit 2), and a worker lacking one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.teams.lead_tools import LeadTools
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.agent.python_tools import (
    abandoned_tool_calls,
    add_python_tools,
    load_tool,
    result_text,
)
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.board import TaskBoard
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.team_file import load_team_file
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TEAMMATE_TOOLS, TeammateStatus
from teamctl.worker.jobs import execute_task
from teamctl.worker.teams.teammate_tools import TeammateTools

from teamctl.tools import ToolContext
from tests.pytools_fixture import tools as TOOLS_MODULE
from tests.pytools_fixture.tools import PROBE
from tests.support.cli import assert_config_error, run_cli
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import error_of, script_run, tool_names, tool_results
from tests.support.runs import make_run
from tests.support.teamfile import team_file
from tests.support.teams import spawn
from tests.support.waiting import wait_until

FIXTURE = "tests.pytools_fixture.tools"
TOOLS = [
    "read_file",
    f"{FIXTURE}:search_docs",
    f"{FIXTURE}:fetch_ticket",
    f"{FIXTURE}:explode",
    f"{FIXTURE}:slow_double",
    f"{FIXTURE}:where_am_i",
    f"{FIXTURE}:long_text",
]


def test_python_tools_in_a_planned_run(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every kind of function runs on a real worker; bad arguments and exceptions go back to
    the model as TOOL_ERROR results in its next request, and the task completes."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    models = script_run(
        llm,
        run_id,
        [{"memberId": "m1", "task": "Use the tools"}],
        member=[
            ToolCalls(
                [
                    ("search_docs", {"query": "redis", "limit": 2}),
                    ("search_docs", {"query": "redis", "limit": "many"}),
                    ("search_docs", {"limit": 2, "colour": "red"}),
                    ("fetch_ticket", {"ticket_id": "7"}),
                    ("explode", {"reason": "boom"}),
                    ("slow_double", {"value": 2.5}),
                    ("where_am_i", {"note": "hi"}),
                    ("long_text", {"chars": 5000}),
                ]
            ),
            "used them",
        ],
    )
    result = run_cli(
        llm,
        workers,
        run_id,
        team_file(
            tmp_path / "t.toml",
            models,
            team_id="pytools",
            members=[{"id": "m1", "tools": TOOLS}],
            options={"tool_result_max_chars": 300},
        ),
    )

    assert result.exit_code == 0, result.output
    first, second = llm.requests[f"member-{run_id}"]
    # Workspace tools, the team tools, then the Python tools in the team file's order.
    assert tool_names(first)[0] == "read_file" and tool_names(first)[1].startswith("team_")
    assert tool_names(first)[-6:] == [
        "search_docs",
        "fetch_ticket",
        "explode",
        "slow_double",
        "where_am_i",
        "long_text",
    ]
    schemas = {t["function"]["name"]: t["function"] for t in first["tools"]}
    search = schemas["search_docs"]
    assert search["description"] == (
        "Search the documentation for a query; returns up to `limit` hits."
    )
    assert search["parameters"] == {
        "type": "object",
        "required": ["query"],
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            "mode": {"type": "string", "enum": ["exact", "fuzzy"]},
        },
    }
    where = schemas["where_am_i"]["parameters"]
    assert where["properties"] == {"note": {"type": "string"}}  # the ToolContext is hidden

    found, bad_limit, unknown, ticket, exploded, doubled, context, long = tool_results(second)
    assert json.loads(found) == {"query": "redis", "hits": ["exact:redis:0", "exact:redis:1"]}
    assert error_of(bad_limit)["errorType"] == "InvalidArguments"
    assert error_of(bad_limit)["error"].startswith("limit: Input should be a valid integer")
    assert error_of(unknown)["error"] == (
        "query is required; colour: Extra inputs are not permitted"
    )
    assert json.loads(ticket) == {"ticket_id": 7, "title": "Ticket 7", "labels": ["bug", "ü"]}
    assert error_of(exploded) == {
        "errorType": "RuntimeError",
        "error": "exploded: boom",
        "tool": "explode",
        "callId": error_of(exploded)["callId"],
    }
    assert json.loads(doubled) == 5.0
    spec_dir = json.loads(context)["workspace"]
    assert json.loads(context) == {
        "note": "hi",
        "run": run_id,
        "task": "task_1",
        "member": "m1",
        "team": "pytools",
        "workspace": spec_dir,
        "beat": True,
    }
    assert spec_dir.endswith(run_id)
    assert long.startswith("x" * 200) and len(long) <= 300
    assert "\n[truncated: the result has 5000 characters; the first " in long
    out = json.loads(result.stdout)
    assert out["task_states"][0]["status"] == "completed"
    assert out["member_results"][0]["output"] == "used them"


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        (
            "tests.no_such_module:search",
            "member m1: tool 'tests.no_such_module:search': cannot "
            "import tests.no_such_module (No module named",
        ),
        (
            f"{FIXTURE}:no_such_function",
            f"member m1: tool '{FIXTURE}:no_such_function': "
            f"{FIXTURE} has no function no_such_function",
        ),
        (
            f"{FIXTURE}:renamed",
            f"member m1: tool '{FIXTURE}:renamed' is named 'read_file', but "
            "that is a workspace tool's name; rename the function",
        ),
    ],
)
def test_unloadable_or_clashing_tool_exits_2_before_anything_is_written(
    redis_url: str, tmp_path: Path, tool: str, says: str
) -> None:
    team = team_file(
        tmp_path / "t.toml",
        {"member": "m", "planner": "p", "synth": "s"},
        team_id="pytools",
        members=[{"id": "m1", "tools": ["read_file", tool]}],
    )
    result = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--redis-url", redis_url, "--workers", "0"]
    )
    assert_config_error(result, says)
    assert redis.Redis.from_url(redis_url).keys("*") == []


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([f"{FIXTURE}:team_search"], "names starting with 'team_' are the team tools'"),
        ([f"{FIXTURE}:read_file"], "that is a workspace tool's name"),
        (
            [f"{FIXTURE}:search_docs", "other.module:search_docs"],
            "another tool of this member has that name",
        ),
        (["tests/tools.py:search"], "write a Python tool as 'package.module:function'"),
        (["mypkg:search-docs"], "write a Python tool as 'package.module:function'"),
    ],
)
def test_team_file_refuses_clashing_or_malformed_entries(
    redis_url: str, tmp_path: Path, tools: list[str], says: str
) -> None:
    team = team_file(
        tmp_path / "t.toml",
        {"member": "m", "planner": "p", "synth": "s"},
        team_id="pytools",
        members=[{"id": "m1", "tools": tools}],
    )
    result = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--redis-url", redis_url, "--workers", "0"]
    )
    assert_config_error(result, says)
    assert "members.0.tools" in result.stderr


def test_a_worker_that_cannot_import_a_tool_fails_the_task_saying_so(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """The run was checked elsewhere (another host may lack the module): the task fails with
    the reason, and no model call is made."""
    make_run(
        conn,
        run_id,
        models={"m1": f"m1-{run_id}"},
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        tools={"m1": ["tests.not_on_this_worker:search"]},
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Search")],
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"

    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert task.status is TaskStatus.FAILED
    assert task.error.startswith(
        "tool 'tests.not_on_this_worker:search': cannot import "
        "tests.not_on_this_worker (No module named"
    )
    assert f"m1-{run_id}" not in llm.requests


def test_the_heartbeat_of_a_tool_context_keeps_the_claim_until_it_is_reclaimed(
    conn: redis.Redis,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool's heartbeat() restarts the claim's TTL (its PTTL grows back to about
    heartbeat_ttl_s); once the claim expired and was reclaimed it answers False, and the
    attempt stops without another model call."""
    monkeypatch.setitem(PROBE, "conn", conn)
    model = llm.script(f"m1-{run_id}", [ToolCalls([("beat_probe", {})])])
    make_run(
        conn,
        run_id,
        models={"m1": model},
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        tools={"m1": [f"{FIXTURE}:beat_probe"]},
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Work")],
        heartbeat_ttl_s=30,
    )

    outcome = execute_task(conn, run_id, "task_1")

    assert outcome == "task_1: abandoned: claim lost", outcome
    assert PROBE["beat"] is True
    assert PROBE["ran_down"] < PROBE["fresh"] - 500
    assert PROBE["after_beat"] > PROBE["ran_down"] + 400  # the TTL started again
    assert 29_000 < PROBE["after_beat"] <= 30_000
    assert PROBE["reclaimed"] == ["task_1"]
    assert PROBE["beat_after_reclaim"] is False
    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert task.status is TaskStatus.READY and task.attempts == 1
    assert len(llm.requests[f"m1-{run_id}"]) == 1


def test_a_huge_exception_reaches_the_model_capped_and_is_not_logged_whole(
    conn: redis.Redis,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception of 500,000 characters is cut to tool_result_max_chars in the TOOL_ERROR the
    model reads, and the worker's log line carries the cut text, not the whole of it."""
    model = llm.script(f"m1-{run_id}", [ToolCalls([("explode_big", {"chars": 500_000})]), "done"])
    make_run(
        conn,
        run_id,
        models={"m1": model},
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        tools={"m1": [f"{FIXTURE}:explode_big"]},
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Fail")],
        tool_result_max_chars=300,
    )

    with caplog.at_level("ERROR", logger="teamctl.shared.agent.tools"):
        assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    (failed,) = tool_results(llm.requests[f"m1-{run_id}"][1])
    error = error_of(failed)
    assert error["errorType"] == "RuntimeError"
    kept = len(error["error"].split("\n")[0])
    assert error["error"] == (
        "e" * kept + f"\n[truncated: the error has 500000 characters; the first {kept} are shown]"
    )
    assert kept >= 50 and len(failed) <= 300
    (logged,) = [r for r in caplog.records if "explode_big" in r.getMessage()]
    assert "in explode_big" in logged.getMessage()  # the frames are kept
    assert len(logged.getMessage()) < 5000 and logged.exc_info is None


def test_results_serialize_and_cap() -> None:
    ticket = load_tool(f"{FIXTURE}:fetch_ticket")
    assert ticket.name == "fetch_ticket"
    model = ticket.fn(3)
    assert result_text(model, 1000) == json.dumps(model.model_dump(mode="json"), ensure_ascii=False)
    assert result_text("plain text", 1000) == "plain text"
    assert result_text([1, {"a": None}], 1000) == '[1, {"a": null}]'
    cut = result_text("y" * 150, 100)
    kept = len(cut.split("\n")[0])
    assert cut == "y" * kept + (
        f"\n[truncated: the result has 150 characters; the first {kept} are shown]"
    )
    assert len(cut) <= 100 < len(cut) + 150 - kept
    toolbox = Toolbox()
    toolbox.add(
        "odd",
        "returns a set of objects",
        load_tool(f"{FIXTURE}:search_docs").args,
        lambda args: result_text(object(), 100),
    )
    assert error_of(toolbox.call("odd", '{"query": "q"}'))["error"].startswith(
        "the tool returned object, which is not JSON-serializable"
    )


def test_team_file_accepts_python_tools(tmp_path: Path) -> None:
    team = team_file(
        tmp_path / "t.toml",
        {"member": "m", "planner": "p", "synth": "s"},
        team_id="pytools",
        members=[{"id": "m1", "tools": TOOLS}],
    )
    assert load_team_file(team).members[0].tools == TOOLS
    load_team_file(team).check_python_tools()
    assert ToolContext.__module__ == "teamctl.shared.agent.python_tools"


def test_a_teammate_spawned_with_python_tools_calls_them(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`team spawn --tool module:function`: offered after the team and workspace tools, called
    in its turn with a context whose heartbeat refreshes the turn lease; a bad argument is a
    TOOL_ERROR result in its memory."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    model = llm.script(
        f"py-{team}",
        [
            ToolCalls(
                [
                    ("search_docs", {"query": "lease"}),
                    ("search_docs", {"query": []}),
                    ("where_am_i", {"note": "mate"}),
                ]
            ),
            "searched",
        ],
    )
    store = TeamStore(wconn, team)
    assert (
        spawn(
            workers,
            team,
            "py",
            model,
            llm.api_base,
            "--tool",
            f"{FIXTURE}:search_docs",
            "--tool",
            "read_file",
            "--tool",
            f"{FIXTURE}:where_am_i",
        ).exit_code
        == 0
    )
    assert store.get("py").tools == ["read_file", f"{FIXTURE}:search_docs", f"{FIXTURE}:where_am_i"]
    wait_until(lambda: store.get("py").status is TeammateStatus.IDLE, message="py idle")

    assert tool_names(llm.requests[f"py-{team}"][0])[-3:] == [
        "read_file",
        "search_docs",
        "where_am_i",
    ]
    found, bad, context = [
        m["content"] for m in store.turns.memory("py") if m.get("role") == "tool"
    ]
    assert json.loads(found)["hits"] == ["exact:lease:0", "exact:lease:1", "exact:lease:2"]
    assert error_of(bad)["error"] == "query: Input should be a valid string"
    assert json.loads(context) == {
        "note": "mate",
        "run": None,
        "task": None,
        "member": "py",
        "team": team,
        "beat": True,
        "workspace": str(tmp_path / "state" / "teams" / team / "workspace"),
    }
    assert store.get("py").idle_reason == "done"


def test_spawn_refuses_a_python_tool_named_like_a_teammate_tool(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    """`team spawn` exits 2 with one line (its turns would only end idle), writing nothing."""
    result = spawn(
        redis_url, team, "clash", OFFLINE_MODEL, None, "--tool", f"{FIXTURE}:list_teammates"
    )
    assert_config_error(
        result,
        f"tool '{FIXTURE}:list_teammates' is named 'list_teammates', "
        "but another tool of this member has that name; rename the "
        "function",
    )
    assert conn.keys("teamctl:team:*") == []


def test_the_leads_spawn_teammate_refuses_it_as_a_tool_error(
    conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    """The lead's spawn_teammate grants only what the team lists, and a team cannot list it
    (checked when the team is created): the model gets a TOOL_ERROR, nothing is spawned, and a
    grantable tool that imports and clashes with nothing spawns."""
    box = Toolbox()
    store = TeamStore(conn, team)
    with pytest.raises(ConfigError, match=f"grantable_tools: tool '{FIXTURE}:idle' is named"):
        store.create(TeamOptions(grantable_tools=[f"{FIXTURE}:idle"]))
    store.create(TeamOptions(grantable_tools=[f"{FIXTURE}:search_docs"]))
    LeadTools(store, OFFLINE_MODEL, None, tmp_path / "ws").add_to(box)
    refused = box.call(
        "spawn_teammate",
        json.dumps({"name": "clash", "role": "r", "prompt": "Go", "tools": [f"{FIXTURE}:idle"]}),
    )
    assert error_of(refused)["errorType"] == "NotGrantable"
    assert error_of(refused)["error"].startswith(f"tool '{FIXTURE}:idle' is not yours to grant")
    assert TeamStore(conn, team).names() == []
    spawned = json.loads(
        box.call(
            "spawn_teammate",
            json.dumps(
                {"name": "fine", "role": "r", "prompt": "Go", "tools": [f"{FIXTURE}:search_docs"]}
            ),
        )
    )
    assert spawned["ok"] is True and spawned["tools"] == [f"{FIXTURE}:search_docs"]


def test_the_static_teammate_tool_names_are_the_ones_a_turn_offers(
    conn: redis.Redis, team: str
) -> None:
    """TEAMMATE_TOOLS (what spawn checks against) lists exactly the tools TeammateTools
    registers."""
    tools = TeammateTools(TeamStore(conn, team), "x", token="")
    assert tools.toolbox().names == list(TEAMMATE_TOOLS)


def test_spawn_with_an_unimportable_python_tool_exits_2(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    result = spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--tool", "nope.mod:search")
    assert_config_error(result, "tool 'nope.mod:search': cannot import nope.mod")
    bad = spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--tool", "nope.mod:a.b")
    assert_config_error(bad, "write a Python tool as 'package.module:function'")
    assert conn.keys("teamctl:team:*") == []


def test_docstring_args_describe_parameters_and_nested_models_are_validated() -> None:
    """A Google-style `Args:` section describes the parameters (the description stops before
    it); a pydantic model parameter is in the schema's $defs and validated field by field."""
    tool = load_tool(f"{FIXTURE}:file_ticket")
    toolbox = Toolbox()
    toolbox.add(tool.name, tool.description, tool.args, lambda args: tool.call(args, None))
    schema = toolbox.schemas()[0]["function"]
    assert schema["description"] == (
        "File a ticket.\n\nNothing is sent anywhere: the tests read the answer."
    )
    params = schema["parameters"]
    assert params["properties"] == {
        "ticket": {"$ref": "#/$defs/Ticket", "description": "The ticket to file, with its labels."},
        "notify": {"type": "boolean", "description": "Whether to tell the team."},
    }
    assert params["$defs"]["Ticket"]["required"] == ["ticket_id", "title", "labels"]
    ticket = {"ticket_id": 3, "title": "t", "labels": ["a"]}
    assert toolbox.call("file_ticket", json.dumps({"ticket": ticket, "notify": True})) == (
        "filed 3 (1 labels), notify=True"
    )
    assert error_of(toolbox.call("file_ticket", '{"ticket": {"ticket_id": 3}}'))["error"] == (
        "ticket.title is required; ticket.labels is required"
    )


@pytest.fixture
def hang(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """HANG reset, with the event that releases a hanging tool (set at the end, so no test
    leaves a thread behind)."""
    release = threading.Event()
    monkeypatch.setattr("tests.pytools_fixture.tools.HANG", {"release": release})
    yield release
    release.set()
    wait_until(lambda: not abandoned_tool_calls(), message="the abandoned tool calls to end")


def test_a_hung_tool_times_out_and_its_abandoned_thread_cannot_heartbeat(
    hang: threading.Event, tmp_path: Path
) -> None:
    """After tool_timeout_s the call is a ToolTimeout error; its thread, still running, gets
    False from the heartbeat (which refreshes nothing more), and the same tool is refused
    at once while that thread runs."""
    refreshed: list[float] = []

    def heartbeat() -> bool:
        refreshed.append(time.monotonic())
        return True

    toolbox = Toolbox()
    context = ToolContext(member_id="m1", workspace=tmp_path, heartbeat=heartbeat)
    add_python_tools(toolbox, [f"{FIXTURE}:hang_and_beat"], context, 1000, timeout_s=0.5)
    started = time.monotonic()
    timed_out = error_of(toolbox.call("hang_and_beat", "{}", "call_1"))
    returned = time.monotonic()
    assert 0.5 <= returned - started < 3
    assert timed_out == {
        "errorType": "ToolTimeout",
        "tool": "hang_and_beat",
        "callId": "call_1",
        "error": "hang_and_beat did not return within 0.5s (the team's "
        "tool_timeout_s) and was abandoned; its result will not "
        "arrive. Go on without it, or call it with less work",
    }
    wait_until(lambda: TOOLS_MODULE.HANG["beats"][-1] is False, message="a refused heartbeat")
    assert refreshed and all(at < returned for at in refreshed)
    assert TOOLS_MODULE.HANG["beats"].count(False) == 1  # it stopped at the first False


def test_a_tool_whose_timed_out_call_still_runs_is_refused(
    hang: threading.Event, tmp_path: Path
) -> None:
    toolbox = Toolbox()
    context = ToolContext(member_id="m1", workspace=tmp_path, heartbeat=lambda: True)
    add_python_tools(toolbox, [f"{FIXTURE}:hang_for"], context, 1000, timeout_s=0.3)
    assert error_of(toolbox.call("hang_for", '{"seconds": 30}'))["errorType"] == "ToolTimeout"
    assert abandoned_tool_calls() == ["hang_for"]
    started = time.monotonic()
    again = error_of(toolbox.call("hang_for", '{"seconds": 0}'))
    assert time.monotonic() - started < 0.3
    assert again["errorType"] == "ToolTimeout"
    assert again["error"] == (
        "hang_for timed out earlier and that call still runs; it cannot "
        "be called again in this session"
    )


def test_a_hung_async_tool_is_cancelled_at_its_timeout(
    hang: threading.Event, tmp_path: Path
) -> None:
    toolbox = Toolbox()
    context = ToolContext(member_id="m1", workspace=tmp_path, heartbeat=lambda: True)
    add_python_tools(
        toolbox, [f"{FIXTURE}:hang_async", f"{FIXTURE}:slow_double"], context, 1000, timeout_s=0.3
    )
    assert error_of(toolbox.call("hang_async", "{}"))["errorType"] == "ToolTimeout"
    wait_until(lambda: TOOLS_MODULE.HANG.get("cancelled"), message="the coroutine cancelled")
    wait_until(lambda: not abandoned_tool_calls(), message="its thread to end")
    assert toolbox.call("hang_async", "{}").startswith("TOOL_ERROR: ")  # not refused: ended
    assert toolbox.call("slow_double", '{"value": 4}') == "8.0"
