"""MCP servers as member tools: mcp-server-git from the package index in a
planned run on real workers (its real tools in the planner's prompt), servers written here with
the SDK, over HTTP and stdio (a crash mid-call, a call that never answers, a huge isError text,
structured content only, a list that never comes, a filter naming a missing tool), servers that
will not start, a killed job's servers, the planner's fallbacks, and the team file's checks."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from rq import Queue
from rq.job import Job
from teamctl.coordinator.cli import main
from teamctl.coordinator.runs.mcp_listing import _reason as mcp_listing_reason
from teamctl.shared.agent.mcp_config import McpServer, resolved_values
from teamctl.shared.agent.mcp_tools import (
    McpHub,
    McpRedirectRefused,
    McpTimeouts,
    OriginGuard,
    StderrTail,
    add_mcp_tools,
    call_result_text,
)
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.board import TaskBoard
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import Scripts
from teamctl.shared.runs.mcp_cache import McpListing, McpToolCache
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.team_file import Member, load_team_file
from teamctl.worker.jobs import execute_task

from teamctl import Team
from tests.support.cli import assert_config_error, run_cli
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.mcp import git_repository, processes_in
from tests.support.replies import error_of, script_run, tool_names, tool_results
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


def workspace_of(run_id: str) -> Path:
    """Where `teamctl run` puts the run's workspace (the tests' TEAMCTL_STATE_DIR)."""
    return Path(os.environ["TEAMCTL_STATE_DIR"]) / "workspaces" / run_id


def test_mcp_server_git_in_a_planned_run(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real server from the package index, started in the run's workspace: its tools are
    offered as git__* with its schema, the call's result reaches the member's next model
    request, the dispatch input and the planner name the tools, and the server is stopped."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    git_repository(workspace_of(run_id))
    models = script_run(
        llm,
        run_id,
        [{"memberId": "m1", "task": "Read the history"}],
        member=[ToolCalls([("git__git_log", {"repo_path": ".", "max_count": 5})]), "read it"],
    )
    team = team_file(
        tmp_path / "t.json",
        models,
        team_id="mcp",
        mcp_servers=[{"name": "git", "command": ["mcp-server-git", "--repository", "."]}],
        members=[{"id": "m1", "mcp": ["git:git_log", "git:git_status"]}],
    )

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["task_states"][0]["status"] == "completed", out
    first, second = llm.requests[f"member-{run_id}"]
    assert tool_names(first)[-2:] == ["git__git_status", "git__git_log"]
    assert not [
        n
        for n in tool_names(first)
        if n.startswith("git__") and n not in ("git__git_status", "git__git_log")
    ]
    log_schema = next(
        t["function"] for t in first["tools"] if t["function"]["name"] == "git__git_log"
    )
    assert log_schema["parameters"]["required"] == ["repo_path"]
    assert log_schema["parameters"]["properties"]["max_count"]["type"] == "integer"
    dispatch = first["messages"][-1]["content"]
    assert "MCP tools: git__git_status, git__git_log" in dispatch
    (history,) = tool_results(second)
    assert "Message: Add the release notes" in history and "Author: Tess" in history
    # The planner is told the tools the server really has (listed by a job on the members'
    # queue before planning), filtered by the member's entries, in the server's order.
    planner_prompt = llm.requests[f"plan-{run_id}"][0]["messages"][0]["content"]
    member_lines = planner_prompt.split("Available members:\n")[1].split("\n\n")[0]
    assert member_lines.splitlines() == [
        "- id=m1, mcp tools:",
        "  - git__git_status: Shows the working tree status",
        "  - git__git_log: Shows the commit logs",
    ], member_lines
    assert "the planner sees the configured MCP entries" not in result.stderr
    cached = redis.Redis.from_url(workers, decode_responses=True).hget(
        RunKeys(run_id).mcp_tools, "git"
    )
    assert "git_log" in [tool["name"] for tool in json.loads(cached)]
    # The attempt stops its servers just after writing its outcome (which ended the run).
    wait_until(
        lambda: processes_in(workspace_of(run_id).resolve()) == [],
        20,
        message="the git server and its git children to be stopped",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def docs_server() -> Iterator[str]:
    """The HTTP MCP server of tests/mcp_fixture on a free port; its URL. Stopped by pid."""
    with http_mcp_server("http_server") as url:
        yield url


@contextlib.contextmanager
def http_mcp_server(module: str, *args: str) -> Iterator[str]:
    """`python -m tests.mcp_fixture.<module> PORT ARGS...` on a free port; its /mcp URL.
    Stopped by pid."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", f"tests.mcp_fixture.{module}", str(port), *args],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, 30, message=f"the {module} MCP server to listen")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def test_http_server_failures_are_tool_errors_and_the_task_completes(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, docs_server: str
) -> None:
    """Structured content comes back as JSON text; a call that never answers and a server
    that dies mid-call are TOOL_ERROR results in the next request, and the task completes."""
    models = script_run(
        llm,
        run_id,
        [{"memberId": "m1", "task": "Look it up"}],
        member=[
            ToolCalls(
                [
                    ("docs__lookup", {"term": "lease"}),
                    ("docs__hang", {}),
                    ("docs__crash", {}),
                    ("docs__lookup", {"term": "again"}),
                ]
            ),
            "looked it up",
        ],
    )
    team = team_file(
        tmp_path / "t.json",
        models,
        team_id="mcp",
        mcp_servers=[{"name": "docs", "url": docs_server}],
        members=[{"id": "m1", "mcp": ["docs"]}],
        options={"mcp_call_timeout_s": 1.5},
    )

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["task_states"][0]["status"] == "completed"
    assert out["member_results"][0]["output"] == "looked it up"
    first, second = llm.requests[f"member-{run_id}"]
    assert tool_names(first)[-4:] == ["docs__lookup", "docs__whoami", "docs__crash", "docs__hang"]
    found, hung, crashed, after = tool_results(second)
    assert json.loads(found) == {"term": "lease", "meaning": "lease means what the glossary says"}
    assert error_of(hung)["errorType"] == "McpTimeout"
    assert error_of(hung)["error"] == (
        "MCP server 'docs' did not answer hang within 1.5s (mcp_call_timeout_s)"
    )
    assert error_of(crashed)["errorType"] == "McpCallFailed"
    assert error_of(crashed)["tool"] == "docs__crash"
    assert error_of(after)["errorType"] == "McpCallFailed"


def store_run(
    conn: redis.Redis,
    run_id: str,
    llm: ScriptedLLM,
    model: str,
    workspace: Path,
    servers: list[McpServer],
    mcp: list[str],
    **options: Any,
) -> None:
    """A run of one member with MCP servers, stored for execute_task in this process."""
    workspace.mkdir(parents=True, exist_ok=True)
    member = Member(id="m1", mcp=mcp, mcp_servers=servers)
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective="Use MCP",
        members=[member],
        options=RunOptions(**options),
        models=ModelChoice(
            planner=model, synthesizer=model, member_default=model, api_base=llm.api_base
        ),
        workspace_dir=str(workspace),
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create([TaskSpec(id="task_1", member_id="m1", task="Go")])


def test_headers_come_from_the_worker_environment(
    conn: redis.Redis,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    docs_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`env:NAME` header values are read where the attempt runs; a missing one fails the task
    naming the variable, before any model call."""
    model = llm.script(f"m1-{run_id}", [ToolCalls([("docs__whoami", {})]), "done"])
    docs = McpServer(name="docs", url=docs_server, headers={"Authorization": "env:DOCS_TOKEN"})
    store_run(conn, run_id, llm, model, tmp_path / "ws", [docs], ["docs:whoami"])
    monkeypatch.setenv("DOCS_TOKEN", "Bearer s3cret")

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    (whoami,) = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert whoami == "authorization=Bearer s3cret"

    other = f"{run_id}-b"
    store_run(conn, other, llm, "unused", tmp_path / "ws2", [docs], ["docs"])
    monkeypatch.delenv("DOCS_TOKEN")
    assert execute_task(conn, other, "task_1") == "task_1: failed"
    task = TaskBoard(conn, RunKeys(other)).get("task_1")
    assert task.error == (
        "MCP server 'docs': header Authorization reads $DOCS_TOKEN, which is "
        "not set in this worker's environment; set it where the workers run"
    )


class Catcher(http.server.ThreadingHTTPServer):
    """An HTTP server on another loopback port that records the headers of every request it
    gets (where a redirect to another origin would lead) and answers 404."""

    def __init__(self) -> None:
        self.received: list[dict[str, str]] = []
        catcher = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                catcher.received.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = answer  # noqa: N815  (http.server's naming)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


@pytest.fixture
def catcher() -> Iterator[Catcher]:
    server = Catcher()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_secret_header_never_follows_a_redirect_to_another_origin(
    conn: redis.Redis,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    catcher: Catcher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 307 to another loopback port is not followed with the `env:` header: the call is a
    tool error naming the server and the other origin never gets the key; a redirect within
    the server's origin is still followed, the header with it. A server whose every request
    goes elsewhere fails the task, saying so."""
    monkeypatch.setenv("DOCS_KEY", "k-s3cret")
    model = llm.script(
        f"m1-{run_id}", [ToolCalls([("docs__moved", {}), ("docs__api_key", {})]), "done"]
    )
    with http_mcp_server("redirect_server", catcher.url) as url:
        docs = McpServer(
            name="docs", url=url.replace("/mcp", "/old/mcp"), headers={"X-Api-Key": "env:DOCS_KEY"}
        )
        store_run(conn, run_id, llm, model, tmp_path / "ws", [docs], ["docs"])
        assert execute_task(conn, run_id, "task_1") == "task_1: completed"
        away = docs.model_copy(update={"url": url.replace("/mcp", "/away/mcp")})
        store_run(conn, f"{run_id}-b", llm, "unused", tmp_path / "ws2", [away], ["docs"])
        assert execute_task(conn, f"{run_id}-b", "task_1") == "task_1: failed"

    moved, api_key = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert [
        headers.get("x-api-key") for headers in catcher.received if "x-api-key" in headers
    ] == []
    error = error_of(moved)
    assert error["tool"] == "docs__moved"
    assert "MCP server 'docs'" in error["error"], error
    assert "another origin" in error["error"], error
    assert api_key == "x-api-key=k-s3cret"
    failed = TaskBoard(conn, RunKeys(f"{run_id}-b")).get("task_1")
    assert failed.error.startswith(
        f"MCP server 'docs' redirected its start to {catcher.url}, another origin than its url"
    )


def test_the_guard_refuses_another_origin_even_where_the_sdk_would_follow(catcher: Catcher) -> None:
    """mcp 2.0 and 2.1 follow every redirect; the guarded client sends no request to another
    origin, whoever asks it to follow."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def post(url: str) -> None:
        async with create_mcp_http_client(headers={"X-Api-Key": "k-s3cret"}) as client:
            OriginGuard(
                McpServer(name="docs", url=url, headers={"X-Api-Key": "env:DOCS_KEY"})
            ).install(client)
            await client.post(
                url,
                json={"method": "tools/call", "params": {"name": "moved"}},
                follow_redirects=True,
            )

    refused = pytest.raises(
        McpRedirectRefused,
        match=(
            "MCP server 'docs' redirected a request to http://127.0.0.1:[0-9]+/mcp, another origin "
            "than its url"
        ),
    )
    with http_mcp_server("redirect_server", catcher.url) as url, refused:
        asyncio.run(post(url))
    assert catcher.received == []


def test_a_server_that_will_not_start_fails_the_task_with_its_stderr(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    broken = McpServer(
        name="index",
        command=[
            sys.executable,
            "-c",
            "import sys; print('index: cannot open /no/such/index.db', file=sys.stderr); "
            "sys.exit(2)",
        ],
    )
    store_run(conn, run_id, llm, "unused", tmp_path / "ws", [broken], ["index"])

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"

    task = TaskBoard(conn, RunKeys(run_id)).get("task_1")
    assert task.status is TaskStatus.FAILED
    assert task.error.startswith("MCP server 'index' (")
    assert "did not start (" in task.error
    assert task.error.endswith("its stderr ends:\nindex: cannot open /no/such/index.db")
    assert processes_in((tmp_path / "ws").resolve()) == []


def test_a_server_slower_than_its_start_timeout_fails_the_task(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """A server that never answers the handshake is stopped after mcp_start_timeout_s."""
    silent = McpServer(
        name="silent",
        command=[
            sys.executable,
            "-c",
            "import sys, time; print('warming up', file=sys.stderr, flush=True); time.sleep(600)",
        ],
    )
    store_run(
        conn, run_id, llm, "unused", tmp_path / "ws", [silent], ["silent"], mcp_start_timeout_s=2
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"

    error = TaskBoard(conn, RunKeys(run_id)).get("task_1").error
    assert "did not start and list its tools within mcp_start_timeout_s=2" in error
    assert error.endswith("its stderr ends:\nwarming up")
    assert processes_in((tmp_path / "ws").resolve()) == []


@pytest.mark.parametrize(
    ("servers", "mcp", "says"),
    [
        (
            [{"name": "git", "command": ["mcp-server-git"]}],
            ["gti"],
            "member m1: mcp entry 'gti' names no [[mcp_servers]] entry (git); add the server or "
            "fix "
            "the name",
        ),
        (
            [{"name": "git", "command": ["x"]}, {"name": "git", "url": "http://h/mcp"}],
            [],
            "two MCP servers are named 'git'",
        ),
        (
            [{"name": "git", "command": ["x"], "url": "http://h/mcp"}],
            [],
            "give exactly one of command (stdio) or url (streamable HTTP)",
        ),
        ([{"name": "g__it", "command": ["x"]}], [], "MCP server name 'g__it'"),
        ([{"name": "team_x", "command": ["x"]}], [], "names starting with 'team'"),
        (
            [{"name": "docs", "url": "http://h/mcp", "headers": {"A": "env:not a name"}}],
            [],
            "write 'env:NAME'",
        ),
        ([{"name": "git", "command": ["x"]}], ["git:"], "mcp entry 'git:'"),
        (
            [{"name": "docs", "url": "http://127.0.0.1:1/mcp", "headers": {"A": "env:REDIS_URL"}}],
            [],
            "mcp_servers.0.headers.A: Value error, 'env:REDIS_URL': $REDIS_URL is teamctl's own "
            "(its Redis and settings) and never goes to an MCP server; give the server a variable "
            "of its own",
        ),
        (
            [{"name": "git", "command": ["x"], "env": {"U": "env:RQ_REDIS_URL"}}],
            [],
            "mcp_servers.0.env.U: Value error, 'env:RQ_REDIS_URL': $RQ_REDIS_URL is teamctl's own",
        ),
        (
            [{"name": "git", "command": ["x"], "env": {"P": "env:REDISCLI_AUTH"}}],
            [],
            "mcp_servers.0.env.P: Value error, 'env:REDISCLI_AUTH': $REDISCLI_AUTH is teamctl's "
            "own",
        ),
        (
            [{"name": "git", "command": ["x"], "env": {"S": "env:TEAMCTL_STATE_DIR"}}],
            [],
            "mcp_servers.0.env.S: Value error, 'env:TEAMCTL_STATE_DIR': $TEAMCTL_STATE_DIR is "
            "teamctl's own",
        ),
        (
            [
                {
                    "name": "docs",
                    "url": "http://docs.example/mcp",
                    "headers": {"A": "env:DOCS_TOKEN"},
                }
            ],
            [],
            "mcp_servers.0: Value error, MCP server 'docs': headers.A reads the worker's "
            "environment but url 'http://docs.example/mcp' is neither https nor loopback "
            "(127.0.0.1, ::1, localhost), so it would cross the network in clear; use an https "
            "URL",
        ),
        # A password in a server's url never shows in the line that refuses it.
        (
            [
                {
                    "name": "docs",
                    "url": "http://bot:Xk9/Qz@docs.example/mcp",
                    "headers": {"A": "env:DOCS_TOKEN"},
                }
            ],
            [],
            "environment but url 'http://***@docs.example/mcp' is neither https nor loopback",
        ),
        (
            [{"name": "docs", "url": "ftp://bot:s3cret@docs.example/mcp"}],
            [],
            "url 'ftp://***@docs.example/mcp': give the server's http(s) endpoint",
        ),
    ],
)
def test_team_file_mcp_errors_exit_2(
    redis_url: str, tmp_path: Path, servers: list[dict[str, Any]], mcp: list[str], says: str
) -> None:
    team = team_file(
        tmp_path / "t.json",
        {"member": "m", "planner": "p", "synth": "s"},
        team_id="mcp",
        mcp_servers=servers,
        members=[{"id": "m1", "mcp": mcp}],
    )
    result = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--redis-url", redis_url, "--workers", "0"]
    )
    assert_config_error(result, says)
    assert "s3cret" not in result.output and "Xk9" not in result.output
    assert redis.Redis.from_url(redis_url).keys("*") == []


@pytest.mark.parametrize(
    "url",
    [
        "https://docs.example/mcp",
        "http://127.0.0.1:8765/mcp",
        "http://127.9.9.9/mcp",
        "http://[::1]:8765/mcp",
        "http://localhost:8765/mcp",
    ],
)
def test_a_header_secret_may_go_to_https_or_loopback(url: str) -> None:
    server = McpServer(name="docs", url=url, headers={"Authorization": "env:DOCS_TOKEN"})
    assert server.exposed_header() is None
    plain = McpServer(name="docs", url="http://docs.example/mcp", headers={"X": "literal"})
    assert plain.exposed_header() is None


def test_relative_commands_resolve_against_the_team_file_s_directory(tmp_path: Path) -> None:
    """What the run's spec (and a team's meta) stores: the absolute path, in the team's
    servers and in each member's copy; a bare name stays for the worker's PATH."""
    (tmp_path / "conf").mkdir()
    team = team_file(
        tmp_path / "conf" / "t.json",
        {"member": "m", "planner": "p", "synth": "s"},
        team_id="mcp",
        mcp_servers=[
            {"name": "local", "command": ["./bin/serve", "--fast"]},
            {"name": "tools", "command": ["../tools/serve"]},
            {"name": "git", "command": ["mcp-server-git", "--repository", "."]},
            {"name": "abs", "command": ["/opt/mcp/serve"]},
        ],
        members=[{"id": "m1", "mcp": ["local", "tools", "git", "abs"]}],
    )

    loaded = load_team_file(team)

    expected = [
        [str(tmp_path / "conf" / "bin" / "serve"), "--fast"],
        [str(tmp_path / "conf" / ".." / "tools" / "serve")],
        ["mcp-server-git", "--repository", "."],
        ["/opt/mcp/serve"],
    ]
    assert [server.command for server in loaded.mcp_servers] == expected
    assert [server.command for server in loaded.members[0].mcp_servers] == expected


def in_state_dir(*parts: str) -> Path:
    return Path(os.environ["TEAMCTL_STATE_DIR"]).joinpath(*parts)


def test_a_command_inside_the_state_dir_exits_2_and_writes_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    """Written inside a workspace, given by a team file there, or reached through a symlink:
    `run` and `team create --file` refuse it before anything is stored."""
    state = Path(os.environ["TEAMCTL_STATE_DIR"])
    script = workspace_script(in_state_dir("workspaces", "r1"))
    (tmp_path / "link").symlink_to(script.parent)
    models = {"member": "m", "planner": "p", "synth": "s"}
    in_workspace = in_state_dir("teams", "t1", "workspace", "t.json")
    in_workspace.parent.mkdir(parents=True)
    teams = [
        (
            team_file(
                tmp_path / "a.json",
                models,
                team_id="mcp",
                mcp_servers=[{"name": "local", "command": [str(script)]}],
                members=[{"id": "m1", "mcp": ["local"]}],
            ),
            str(script),
        ),
        (
            team_file(
                in_workspace,
                models,
                team_id="mcp",
                mcp_servers=[{"name": "local", "command": ["./serve"]}],
                members=[{"id": "m1", "mcp": ["local"]}],
            ),
            str(in_workspace.parent / "serve"),
        ),
        (
            team_file(
                tmp_path / "c.json",
                models,
                team_id="mcp",
                mcp_servers=[{"name": "local", "command": ["link/serve"]}],
                members=[{"id": "m1", "mcp": ["local"]}],
            ),
            str(tmp_path / "link" / "serve"),
        ),
    ]
    for team, command in teams:
        says = (
            f"mcp_servers.0.command: MCP server 'local' would run {command}, inside "
            f"teamctl's state dir {state}, where the agents' workspaces are and members "
            "write files; install the server outside it and name that path"
        )
        ran = CliRunner().invoke(
            main, ["run", "x", "--team", str(team), "--redis-url", redis_url, "--workers", "0"]
        )
        assert_config_error(ran, says)
        created = CliRunner().invoke(
            main, ["team", "create", "-t", "t1", "--file", str(team), "--redis-url", redis_url]
        )
        assert_config_error(created, says)
    assert redis.Redis.from_url(redis_url).keys("*") == []
    assert not (script.parent / "ran").exists()


def test_a_team_given_in_code_resolves_commands_against_the_current_directory(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python API's team has no file: its relative paths are the current directory's
    when it starts, and one inside the state dir is refused before anything is stored."""
    local = McpServer(name="local", command=["./bin/serve"])
    team = Team([Member(id="m1", mcp=["local"])], mcp_servers=[local])
    monkeypatch.chdir(tmp_path)
    resolved = team._file.resolve_mcp_commands(Path.cwd())
    assert resolved.members[0].mcp_servers[0].command == [str(tmp_path / "bin" / "serve")]
    assert team._file.mcp_servers == [local]  # the caller's team is left as given

    workspace = in_state_dir("workspaces", "r1")
    workspace.mkdir(parents=True)
    monkeypatch.chdir(workspace)
    with pytest.raises(ConfigError) as refused:
        team.start("x", redis_url=redis_url, workers=0)
    assert str(refused.value).startswith(
        f"mcp_servers.0.command: MCP server 'local' would run {workspace / 'bin' / 'serve'}, "
        "inside teamctl's state dir"
    )
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_the_coordinator_never_imports_the_sdk(tmp_path: Path) -> None:
    """Validating an MCP team file and rendering its planner prompt load neither the MCP SDK
    nor litellm (the coordinator starts no server and makes no model call)."""
    team = team_file(
        tmp_path / "t.json",
        {"member": "m", "planner": "p", "synth": "s"},
        team_id="mcp",
        mcp_servers=[{"name": "git", "command": ["mcp-server-git"]}],
        members=[{"id": "m1", "mcp": ["git"]}],
    )
    script = (
        "import sys\nfrom pathlib import Path\nimport teamctl.coordinator.cli\n"
        "import teamctl.coordinator.runs.run\n"
        "from teamctl.coordinator.runs.roles import planner_prompt\n"
        "from teamctl.shared.team_file import load_team_file\n"
        f"team = load_team_file(Path({str(team)!r}))\n"
        "print(planner_prompt('x', team.members).splitlines()[-4])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'litellm')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["- id=m1, mcp tools=git", "[]"]


def test_a_tool_list_cached_after_the_run_ended_expires_with_the_run(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    conn.set(keys.spec, "{}", ex=600)  # an ended run: expire_run gave its keys a TTL
    cache = McpToolCache(conn, keys, Scripts(conn))

    cache.remember("git", [{"name": "git_log"}])
    cache.remember("git", [{"name": "other"}])

    assert json.loads(conn.hget(keys.mcp_tools, "git")) == [{"name": "git_log"}]
    assert 0 < conn.pttl(keys.mcp_tools) <= 600_000


def test_a_listing_note_written_after_the_run_ended_expires_with_the_run(
    conn: redis.Redis, run_id: str
) -> None:
    """A listing job that outlived its coordinator's wait leaves no key without a TTL."""
    keys = RunKeys(run_id)
    conn.set(keys.spec, "{}", ex=600)  # an ended run: expire_run gave its keys a TTL
    cache = McpToolCache(conn, keys, Scripts(conn))

    cache.note_listing("git", McpListing(listed=False, error="did not start", worker="h:1"))

    assert cache.listings() == {
        "git": McpListing(listed=False, error="did not start", worker="h:1")
    }
    assert conn.lrange(keys.mcp_listed, 0, -1) == ["git"]
    assert 0 < conn.pttl(keys.mcp_listing) <= 600_000
    assert 0 < conn.pttl(keys.mcp_listed) <= 600_000


def workspace_script(workspace: Path, relative: str = "bin/serve") -> Path:
    """An executable script in the workspace, as a member's write_file could leave it: run, it
    would leave `ran` beside itself."""
    script = workspace / relative
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        f"#!{sys.executable}\nfrom pathlib import Path\n"
        "Path(__file__).with_name('ran').write_text('ran')\n"
    )
    script.chmod(0o755)
    return script


def test_the_worker_never_runs_a_command_from_the_workspace(
    conn: redis.Redis,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec written by another host (a team file's relative paths are absolute by then): a
    relative path is never looked up in the workspace, and neither an absolute path nor a
    bare name found on PATH may lie there; each fails the task, and the script never ran."""
    workspace = tmp_path / "ws"
    script = workspace_script(workspace)
    refusals = {
        "./bin/serve": "MCP server 'local': command './bin/serve' is a relative path, which "
        "workers never look up in the workspace; give it in a team file "
        "(relative to the file's directory) or as an absolute path",
        str(script): f"MCP server 'local': command {str(script)!r} is {script}, inside the "
        "workspace, where members write files; install the server outside it and "
        "name that path",
        "serve": f"MCP server 'local': command 'serve' is {script}, inside the workspace, "
        "where members write files; install the server outside it and name that path",
    }
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")
    for number, (command, error) in enumerate(refusals.items()):
        run = f"{run_id}-{number}"
        store_run(
            conn,
            run,
            llm,
            "unused",
            workspace,
            [McpServer(name="local", command=[command])],
            ["local"],
        )
        assert execute_task(conn, run, "task_1") == "task_1: failed"
        assert TaskBoard(conn, RunKeys(run)).get("task_1").error == error
    assert not (script.parent / "ran").exists()


def test_a_missing_absolute_command_fails_the_task_saying_where_to_install_it(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    missing = tmp_path / "opt" / "serve"
    store_run(
        conn,
        run_id,
        llm,
        "unused",
        tmp_path / "ws",
        [McpServer(name="local", command=[str(missing)])],
        ["local"],
    )
    assert execute_task(conn, run_id, "task_1") == "task_1: failed"
    assert TaskBoard(conn, RunKeys(run_id)).get("task_1").error == (
        f"MCP server 'local': command {str(missing)!r} is not an executable file on this "
        "worker; install it at that path on every worker host and check its x bit"
    )


def test_a_worker_refuses_env_values_naming_teamctl_s_own_variables() -> None:
    """Checked again where values are read: any host that reaches Redis can write a spec."""
    environ = {"REDIS_URL": "redis://:pw@h", "TEAMCTL_STATE_DIR": "/s", "TOKEN": "t"}
    assert resolved_values({"A": "env:TOKEN", "B": "lit"}, "docs", "header", environ) == {
        "A": "t",
        "B": "lit",
    }
    for name in ("REDIS_URL", "RQ_REDIS_URL", "REDISCLI_AUTH", "TEAMCTL_STATE_DIR"):
        with pytest.raises(ConfigError) as refused:
            resolved_values({"A": f"env:{name}"}, "docs", "header", environ)
        assert str(refused.value) == (
            f"MCP server 'docs': header A = 'env:{name}': ${name} is teamctl's own (its Redis "
            "and settings) and never goes to an MCP server; give the server a variable of its "
            "own"
        )


def test_ctrl_c_while_a_server_starts_stops_the_server(tmp_path: Path) -> None:
    """The hub cancels the half-started session's holder, whose unwinding stops the server."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    silent = McpServer(
        name="silent", command=[sys.executable, "-c", "import time; time.sleep(600)"]
    )
    interrupt = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    with McpHub(workspace, McpTimeouts(30, 30, 5)) as hub:
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            hub.start(silent)
        interrupt.join()
        assert processes_in(workspace.resolve()) == []


def test_a_server_s_stderr_is_kept_to_its_last_64_kib() -> None:
    """Drained as it is written (a pipe, not a file that grows for the server's life); only
    the end is kept."""
    tail = StderrTail()
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('x' * 1_000_000 + '\\nthe end')"],
        stderr=tail.writer,
    )
    tail.close_writer()
    assert writer.wait(timeout=30) == 0
    assert tail.tail() == "x" * 1992 + "\nthe end"
    kept = tail.kept()
    assert len(kept) == 64 * 1024 and kept.endswith(b"x\nthe end")


def test_a_noisy_server_starts_and_a_failure_quotes_only_the_end_of_its_stderr(
    tmp_path: Path,
) -> None:
    """A server that writes far more than a pipe holds before it answers still starts (its
    stderr is read while it runs); one that fails is quoted by its last 2000 characters."""
    noisy = McpServer(
        name="index",
        command=[
            sys.executable,
            "-c",
            "import runpy, sys; sys.stderr.write('n' * 1_000_000); "
            "sys.stderr.flush(); runpy.run_module('tests.mcp_fixture.stdio_server', "
            "run_name='__main__')",
        ],
        env={"PYTHONPATH": str(REPO_ROOT)},
    )
    failing = McpServer(
        name="broken",
        command=[
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('b' * 1_000_000 + "
            "'\\ncannot open the index'); sys.exit(2)",
        ],
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with McpHub(workspace, McpTimeouts(30, 30, 5)) as hub:
        assert "stats" in [tool.name for tool in hub.start(noisy)]
        with pytest.raises(ConfigError) as failed:
            hub.start(failing)
    assert str(failed.value).endswith("its stderr ends:\n" + "b" * 1978 + "\ncannot open the index")
    assert len(str(failed.value)) < 2600
    assert processes_in(workspace.resolve()) == []


def index_server(*args: str) -> McpServer:
    """The stdio server of tests/mcp_fixture, run by this Python from this checkout."""
    return McpServer(
        name="index",
        command=[sys.executable, "-m", "tests.mcp_fixture.stdio_server", *args],
        env={"PYTHONPATH": str(REPO_ROOT)},
    )


def test_a_stdio_server_s_home_is_private_outside_the_workspace_and_git_is_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME is a 0700 directory of the hub's, not the workspace (programs read their config
    there), removed when the hub closes; git's command-running settings are pinned by the
    environment (outranking a repository's config), and the worker's secrets are absent."""
    monkeypatch.setenv("REDIS_URL", "redis://:secret@host")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with McpHub(workspace, McpTimeouts(30, 30, 10)) as hub:
        hub.start(index_server())
        told = json.loads(call_result_text(hub.call("index", "environment", {}), 100_000))
        env = told["env"]
        home = Path(env["HOME"])
        assert home == hub.home and home.is_dir() and not home.is_relative_to(tmp_path)
        assert told["home_mode"] == "0o700"
    assert not home.exists()
    pinned = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pinned == {
        "core.fsmonitor": "false",
        "core.hooksPath": "/dev/null",
        "core.pager": "cat",
        "core.editor": "true",
        "sequence.editor": "true",
        "core.sshCommand": "ssh",
        "core.askPass": "",
        "credential.helper": "",
        "safe.bareRepository": "explicit",
    }
    assert (env["GIT_CONFIG_NOSYSTEM"], env["GIT_CONFIG_GLOBAL"], env["GIT_PAGER"]) == (
        "1",
        "/dev/null",
        "cat",
    )
    assert env["PYTHONSAFEPATH"] == "1" and "REDIS_URL" not in env


def test_a_worker_refuses_a_secret_header_in_clear_with_the_team_file_s_words(
    tmp_path: Path,
) -> None:
    """A spec that skipped the team file's check (any host that reaches Redis can write one)
    is refused by the worker before connecting, with the same text."""
    server = McpServer.model_construct(
        name="docs",
        command=None,
        env={},
        url="http://docs.example/mcp",
        headers={"Authorization": "env:DOCS_TOKEN"},
    )
    with McpHub(tmp_path, McpTimeouts(5, 5, 5)) as hub, pytest.raises(ConfigError) as refused:
        hub.start(server)
    assert str(refused.value) == (
        "MCP server 'docs': headers.Authorization reads the worker's environment but url "
        "'http://docs.example/mcp' is neither https nor loopback (127.0.0.1, ::1, localhost), "
        "so it would cross the network in clear; use an https URL"
    )


def test_stdio_server_results_and_failures_reach_the_model(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """Over stdio: a result with only structured content comes back as its JSON, a huge isError
    text as a capped McpToolError, a call that never answers as McpTimeout, a server that dies
    mid-call (started again once and the call retried: it dies again) as McpCallFailed, and the
    next call starts it again and is answered; the task completes and nothing is left."""
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    ("index__stats", {}),
                    ("index__fail_loudly", {"chars": 200_000}),
                    ("index__hang", {}),
                    ("index__crash", {}),
                    ("index__stats", {}),
                ]
            ),
            "done",
        ],
    )
    store_run(
        conn,
        run_id,
        llm,
        model,
        tmp_path / "ws",
        [index_server()],
        ["index"],
        mcp_call_timeout_s=4,
        tool_result_max_chars=300,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    stats, loud, hung, crashed, after = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert json.loads(stats) == {"documents": 42, "terms": 7}
    assert error_of(loud)["errorType"] == "McpToolError"
    cut = error_of(loud)["error"]
    assert re.fullmatch(
        r"[^\n]{50,300}\n\[truncated: the error has 2000\d\d characters; the "
        r"first \d+ are shown\]",
        cut,
    ), cut[-200:]
    assert len(loud) <= 300
    assert error_of(hung) == {
        "errorType": "McpTimeout",
        "tool": "index__hang",
        "callId": error_of(hung)["callId"],
        "error": "MCP server 'index' did not answer hang within 4s (mcp_call_timeout_s)",
    }
    assert error_of(crashed)["errorType"] == "McpCallFailed"
    assert error_of(crashed)["error"].startswith("MCP server 'index' failed on crash: ")
    assert json.loads(after) == {"documents": 42, "terms": 7}
    assert processes_in((tmp_path / "ws").resolve()) == []


def test_a_server_that_never_lists_its_tools_fails_the_task(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """A server that answers the handshake but not tools/list is stopped after
    mcp_list_timeout_s, and the task's error says which step it did not finish."""
    store_run(
        conn,
        run_id,
        llm,
        "unused",
        tmp_path / "ws",
        [index_server("--no-list")],
        ["index"],
        mcp_list_timeout_s=2,
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"

    error = TaskBoard(conn, RunKeys(run_id)).get("task_1").error
    assert error.startswith("MCP server 'index' (`")
    assert (
        "answered the handshake but did not list its tools within mcp_list_timeout_s=2" in error
    ), error
    assert processes_in((tmp_path / "ws").resolve()) == []


def test_an_entry_naming_a_tool_the_server_lacks_fails_the_task(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path, docs_server: str
) -> None:
    """`docs:lokup` (a typo) fails the attempt naming the missing tool and the server's
    tools, before any model call, instead of leaving the member without it."""
    docs = McpServer(name="docs", url=docs_server)
    store_run(
        conn, run_id, llm, f"m1-{run_id}", tmp_path / "ws", [docs], ["docs:lookup", "docs:lokup"]
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: failed"

    assert TaskBoard(conn, RunKeys(run_id)).get("task_1").error == (
        "MCP server 'docs' has no tool 'lokup' (mcp entry docs:lokup); its tools: lookup, "
        "whoami, crash, hang; fix the member's mcp entry"
    )
    assert f"m1-{run_id}" not in llm.requests


def test_the_planner_falls_back_to_the_entries_of_a_server_that_will_not_start(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """The listing job notes the server's error: the planner sees the configured entries, one
    stderr line says why, and the member's attempt fails on the same server."""
    models = script_run(llm, run_id, [{"memberId": "m1", "task": "Search"}])
    broken = [sys.executable, "-c", "import sys; print('no index', file=sys.stderr); sys.exit(2)"]
    team = team_file(
        tmp_path / "t.json",
        models,
        team_id="mcp",
        mcp_servers=[{"name": "index", "command": broken}],
        members=[{"id": "m1", "mcp": ["index:search"]}],
    )

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 1, result.output
    planner_prompt = llm.requests[f"plan-{run_id}"][0]["messages"][0]["content"]
    assert "- id=m1, mcp tools=index:search\n" in planner_prompt
    (line,) = [x for x in result.stderr.splitlines() if "configured MCP entries" in x]
    assert line.startswith(
        "teamctl: the planner sees the configured MCP entries, not the "
        "tools, of index: MCP server 'index' ("
    )
    assert "did not start (" in line
    assert line.endswith("; its stderr ends: no index")  # why, not only that it did not
    error = json.loads(result.stdout)["task_states"][0]["error"]
    assert "did not start (" in error and error.endswith("its stderr ends:\nno index")


def test_the_fallback_line_keeps_the_tail_s_last_printable_line() -> None:
    """What a terminal would act on is dropped before the last line is picked, so a tail that
    ends in an escape sequence (a spinner's) still shows why; nothing at all is said so."""
    error = "MCP server 'x' did not start; its stderr ends:\nno index\n\x1b[?25h\n"
    assert mcp_listing_reason(error) == "MCP server 'x' did not start; its stderr ends: no index"
    assert mcp_listing_reason(" \n\x1b[0m") == "not listed"


def test_the_planner_waits_for_the_listing_at_most_the_start_and_list_timeouts(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """No worker serves the queue of the member that uses the server: stderr says so, and
    after mcp_start_timeout_s + mcp_list_timeout_s the planner gets the configured entries."""
    models = script_run(llm, run_id, [{"memberId": "m2", "task": "Write"}])
    team = tmp_path / "t.json"
    team.write_text(
        json.dumps(
            {
                "team_id": "mcp",
                "model": models["member"],
                "planner": {"model": models["planner"]},
                "synthesizer": {"model": models["synth"]},
                "mcp_servers": [{"name": "time", "command": ["mcp-server-time"]}],
                "members": [{"id": "m1", "mcp": ["time"], "queue": "lonely"}, {"id": "m2"}],
                "options": {"mcp_start_timeout_s": 2.5, "mcp_list_timeout_s": 1.5},
            }
        )
    )

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    planner_prompt = llm.requests[f"plan-{run_id}"][0]["messages"][0]["content"]
    assert "- id=m1, mcp tools=time\n- id=m2\n" in planner_prompt
    assert "teamctl: no worker listens on queue lonely;" in result.stderr
    assert (
        "teamctl: the planner sees the configured MCP entries, not the tools, of time: "
        "not listed within mcp_start_timeout_s + mcp_list_timeout_s = 4s"
        in result.stderr.splitlines()
    )


def test_the_planner_stops_waiting_once_the_listing_job_ended_without_a_note(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """A listing job that ends without noting (here cancelled while queued) leaves nothing to
    wait for: the planner gets the configured entries, and stderr says the job ended, not
    that the (one minute) budget ran out."""
    models = script_run(llm, run_id, [{"memberId": "m2", "task": "Write"}])
    team = tmp_path / "t.json"
    team.write_text(
        json.dumps(
            {
                "team_id": "mcp",
                "model": models["member"],
                "planner": {"model": models["planner"]},
                "synthesizer": {"model": models["synth"]},
                "mcp_servers": [{"name": "time", "command": ["mcp-server-time"]}],
                "members": [{"id": "m1", "mcp": ["time"], "queue": "unserved"}, {"id": "m2"}],
                "options": {"mcp_start_timeout_s": 30, "mcp_list_timeout_s": 30},
            }
        )
    )
    rq_conn = redis.Redis.from_url(workers)
    queued = Queue("unserved", connection=rq_conn)

    def cancel_the_listing_job() -> None:
        (job_id,) = wait_until(queued.get_job_ids, 30, message="the listing job to be queued")
        Job.fetch(job_id, connection=rq_conn).cancel()

    canceller = threading.Thread(target=cancel_the_listing_job, daemon=True)
    canceller.start()
    result = run_cli(llm, workers, run_id, team)
    canceller.join(timeout=30)

    assert result.exit_code == 0, result.output
    planner_prompt = llm.requests[f"plan-{run_id}"][0]["messages"][0]["content"]
    assert "- id=m1, mcp tools=time\n- id=m2\n" in planner_prompt
    assert (
        "teamctl: the planner sees the configured MCP entries, not the tools, of time: "
        "its listing job ended without listing it (the worker's log says why)"
        in result.stderr.splitlines()
    )


def test_a_killed_job_takes_its_stdio_servers_with_it(tmp_path: Path) -> None:
    """A SIGKILLed job runs nothing to stop its servers (they lead sessions of their own); the
    parent-death signal armed before the server's exec kills one that ignores its stdin."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from teamctl.shared.agent.mcp_config import McpServer\n"
        "from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts\n"
        f"hub = McpHub(Path({str(workspace)!r}), McpTimeouts(600, 600, 5))\n"
        "hub.start(McpServer(name='silent', command=[sys.executable, '-c', "
        "'import time; time.sleep(600)']))\n"
    )
    job = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT)
    try:
        (server,) = wait_until(
            lambda: processes_in(workspace.resolve()), 30, message="the silent server to start"
        )
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
        wait_until(
            lambda: processes_in(workspace.resolve()) == [],
            10,
            message=f"the server (pid {server}) to die with its job",
        )
    finally:
        job.kill()
        job.wait()
        for pid in processes_in(workspace.resolve()):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


def test_each_call_carries_its_idempotency_key_in_meta(tmp_path: Path) -> None:
    """run:task:tool_call_id, the same for the same call id (a step run again from its
    recorded reply), so a server with effects outside teamctl can skip repeated work."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = index_server()
    with McpHub(workspace, McpTimeouts(30, 30, 10), call_key_prefix="run1:task_1") as hub:
        tools = Toolbox()
        add_mcp_tools(tools, hub, server, hub.start(server), ["index"], 10_000)
        name = next(n for n in tools.names if n.endswith("call_key"))
        first = tools.call(name, "{}", "call_7")
        assert "run1:task_1:call_7" in first
        assert "run1:task_1:call_7" in tools.call(name, "{}", "call_7")
        assert "run1:task_1:call_8" in tools.call(name, "{}", "call_8")
