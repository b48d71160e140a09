"""MCP servers as persistent teammates' tools: the team's `[[mcp_servers]]` stored by
`team create --file`, `team spawn --mcp`, mcp-server-git from the package index in a real turn
on real workers, the plan-mode gate on tools a server does not mark read-only, a server that
will not start, and the spawn's checks (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from teamctl.coordinator.advice import for_this_shell
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus, team_workspace

from tests.support.cli import assert_config_error
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.mcp import git_repository, processes_in
from tests.support.replies import error_of, tool_names
from tests.support.teams import cli, spawn
from tests.support.waiting import wait_until

GIT = {"name": "git", "command": ["mcp-server-git", "--repository", "."]}


def create_team(
    url: str, team: str, tmp_path: Path, servers: list[dict[str, Any]], **teammates: Any
) -> Path:
    """`teamctl team create --file` with these MCP servers; the team's workspace, holding a
    git repository with one commit."""
    path = tmp_path / "team.json"
    path.write_text(json.dumps({"mcp_servers": servers, "teammates": teammates}))
    created = cli("team", "create", "-t", team, "--redis-url", url, "--file", str(path))
    assert created.exit_code == 0, created.output
    workspace = team_workspace(Path(os.environ["TEAMCTL_STATE_DIR"]), team)
    git_repository(workspace)
    return workspace


def tool_messages(store: TeamStore, name: str) -> list[str]:
    return [m["content"] for m in store.turns.memory(name) if m.get("role") == "tool"]


def test_a_teammate_calls_mcp_server_git_kept_warm_until_the_team_is_deleted(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Offered as git__* after its other tools, with the server's schema; the call's result is
    in its memory and its next model request; the server outlives the turn (warm in the
    worker for the team's next turns) and is gone once the team is deleted."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    workspace = create_team(workers, team, tmp_path, [GIT])
    model = llm.script(
        f"gitmate-{team}",
        [ToolCalls([("git__git_log", {"repo_path": ".", "max_count": 5})]), "read the log"],
    )
    store = TeamStore(wconn, team)

    result = spawn(
        workers,
        team,
        "gitmate",
        model,
        llm.api_base,
        "--tool",
        "read_file",
        "--mcp",
        "git:git_log",
        "--mcp",
        "git:git_status",
    )

    assert result.exit_code == 0, result.output
    assert store.get("gitmate").mcp == ["git:git_log", "git:git_status"]
    wait_until(lambda: store.get("gitmate").status is TeammateStatus.IDLE, message="gitmate idle")
    first, second = llm.requests[f"gitmate-{team}"]
    assert tool_names(first)[-3:] == ["read_file", "git__git_status", "git__git_log"]
    schema = next(t["function"] for t in first["tools"] if t["function"]["name"] == "git__git_log")
    assert schema["parameters"]["required"] == ["repo_path"]
    assert "git__git_status, git__git_log" in first["messages"][0]["content"]
    (history,) = tool_messages(store, "gitmate")
    assert "Message: Add the release notes" in history and "Author: Tess" in history
    assert second["messages"][-1]["content"] == history
    teammate = store.get("gitmate")
    assert (teammate.idle_reason, teammate.last_error) == ("done", None)
    # mcp-server-git, warm, with the `git cat-file` processes GitPython keeps beside it.
    assert any(
        b"mcp-server-git" in Path(f"/proc/{pid}/cmdline").read_bytes()
        for pid in processes_in(workspace.resolve())
    )
    deleted = cli("team", "delete", "-t", team, "--redis-url", workers)
    assert deleted.exit_code == 0, deleted.output
    wait_until(
        lambda: processes_in(workspace.resolve()) == [],
        20,
        message="the git server to stop once the team is deleted",
    )


def test_in_plan_mode_only_the_tools_a_server_marks_read_only_run_before_approval(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mcp-server-git marks git_log read-only and git_add not: before the lead approves a plan,
    the log runs and the add answers with the plan-mode refusal, staging nothing."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    workspace = create_team(workers, team, tmp_path, [GIT])
    (workspace / "draft.txt").write_text("draft\n")
    model = llm.script(
        f"planner-{team}",
        [
            ToolCalls(
                [
                    ("git__git_log", {"repo_path": ".", "max_count": 1}),
                    ("git__git_add", {"repo_path": ".", "files": ["draft.txt"]}),
                ]
            ),
            "waiting for approval",
        ],
    )
    store = TeamStore(wconn, team)

    assert (
        spawn(
            workers, team, "careful", model, llm.api_base, "--plan-mode", "--mcp", "git"
        ).exit_code
        == 0
    )
    wait_until(lambda: store.get("careful").status is TeammateStatus.IDLE, message="careful idle")

    # The gate wraps git_add in place: the model still gets the server's own schema for it.
    schemas = {
        t["function"]["name"]: t["function"]["parameters"]
        for t in llm.requests[f"planner-{team}"][0]["tools"]
    }
    assert schemas["git__git_add"]["required"] == ["repo_path", "files"]
    assert schemas["git__git_add"]["properties"]["files"]["type"] == "array"
    logged, added = tool_messages(store, "careful")
    assert "Add the release notes" in logged
    assert error_of(added)["errorType"] == "PlanNotApproved"
    assert error_of(added)["error"].startswith(
        "git__git_add is not allowed yet: you are in plan mode"
    )
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=workspace, check=True, capture_output=True, text=True
    ).stdout
    assert status.strip() == "?? draft.txt"


def test_a_server_that_will_not_start_idles_the_teammate_with_its_stderr(
    workers: str, wconn: redis.Redis, team: str, tmp_path: Path
) -> None:
    broken = {
        "name": "index",
        "command": [
            sys.executable,
            "-c",
            "import sys; print('index: cannot open /no/such/index.db', file=sys.stderr); "
            "sys.exit(2)",
        ],
    }
    workspace = create_team(workers, team, tmp_path, [broken])
    store = TeamStore(wconn, team)

    assert spawn(workers, team, "indexer", OFFLINE_MODEL, None, "--mcp", "index").exit_code == 0
    wait_until(lambda: store.get("indexer").status is TeammateStatus.IDLE, message="indexer idle")

    teammate = store.get("indexer")
    assert teammate.idle_reason.startswith("error: MCP server 'index' (")
    assert "did not start (" in teammate.last_error
    assert teammate.last_error.endswith("its stderr ends:\nindex: cannot open /no/such/index.db")
    assert processes_in(workspace.resolve()) == []


def test_spawn_with_mcp_entries_the_team_lacks_exits_2_and_writes_nothing(
    redis_url: str, conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    bare = spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--mcp", "git")
    assert_config_error(
        bare,
        for_this_shell(redis_url).spell(
            "mcp entry 'git' names no [[mcp_servers]] entry (none is configured); add the server "
            "or "
            "fix the name (create the team from a team file with [[mcp_servers]]: `teamctl team "
            "create --file FILE`)"
        ),
    )
    assert conn.keys("teamctl:team:*") == []

    create_team(redis_url, team, tmp_path, [GIT])
    keys = sorted(conn.keys("teamctl:team:*"))
    unknown = spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--mcp", "gti")
    assert_config_error(unknown, "mcp entry 'gti' names no [[mcp_servers]] entry (git)")
    malformed = spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--mcp", "git:a,b")
    assert_config_error(malformed, "mcp entry 'git:a,b': write a server's name")
    assert sorted(conn.keys("teamctl:team:*")) == keys


def test_the_lead_is_told_the_team_s_servers_and_spawns_with_mcp(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    alice = llm.script(f"alice-{team}", ["nothing to do"])
    create_team(workers, team, tmp_path, [GIT], grantable_mcp=["git"], grantable_models=[alice])
    spawn_alice = ToolCalls(
        [
            (
                "spawn_teammate",
                {
                    "name": "alice",
                    "role": "historian",
                    "prompt": "Go.",
                    "model": alice,
                    "mcp": ["git:git_log"],
                },
            )
        ]
    )
    lead = llm.script(
        f"lead-{team}", handler=lambda body: spawn_alice if len(body["messages"]) == 2 else "noted"
    )

    result = cli(
        "lead",
        "-t",
        team,
        "--redis-url",
        workers,
        "--workers",
        "0",
        "--model",
        lead,
        "--api-base",
        llm.api_base,
        "-m",
        "Spawn alice.",
        "--until-idle",
    )

    assert result.exit_code == 0, result.output
    system = llm.requests[f"lead-{team}"][0]["messages"][0]["content"]
    assert "MCP servers it\nmay use: git, each by name" in system
    assert TeamStore(wconn, team).get("alice").mcp == ["git:git_log"]
    assert tool_names(llm.requests[f"alice-{team}"][0])[-1] == "git__git_log"
