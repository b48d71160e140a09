"""A workspace kept in Redis across hosts that share no workspace directory: a member on another
host (its own network namespace, its own temporary directory) writes a file, a member on the
Redis host reads and edits it, and people read the result with `teamctl files` and `export`.

The coordinator names Redis by a loopback address, as a coordinator on the Redis host would, and
`auto` still keeps the files in Redis (the loopback URL says nothing of who else reaches it):
the run's directory on the coordinator's host is never created, every byte goes through Redis.
A workspace kept `local` on purpose is refused by the worker on the other host, with one line
that says why and what to set, and the task fails with it; so is a teammate's turn.
The same path runs at the default options with calls of several seconds in the realistic tier."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process, worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.hosts import this_host
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.shared.workspace.redis_files import WorkspaceFiles

from tests.support.cli import TEAMCTL, run_cli
from tests.support.hosts import TwoHosts, redis_host
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teamfile import team_file
from tests.support.teams import spawn
from tests.support.timescale import scaled, timing_options
from tests.support.waiting import wait_until

REPORT = "notes/report.md"


def team_toml(path: Path, models: dict[str, str]) -> Path:
    path.write_text(
        "\n".join(
            [
                'team_id = "hosts"',
                f'planner = {{ model = "{models["planner"]}", queue = "here" }}',
                f'synthesizer = {{ model = "{models["synth"]}", queue = "here" }}',
                "[[members]]",
                'id = "writer"',
                'queue = "remote"',
                f'model = "{models["writer"]}"',
                'tools = ["write_file", "read_file"]',
                "[[members]]",
                'id = "editor"',
                'queue = "here"',
                f'model = "{models["editor"]}"',
                'tools = ["read_file", "edit_file"]',
            ]
        )
        + "\n"
    )
    return path


def test_members_on_two_hosts_share_one_workspace_through_redis_by_default(
    two_hosts: TwoHosts,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = [
        {"id": "a", "memberId": "writer", "task": "draft"},
        {"id": "b", "memberId": "editor", "task": "edit", "dependsOn": ["a"]},
    ]
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "writer": llm.script(
            f"writer-{run_id}",
            [
                ToolCalls([("write_file", {"path": REPORT, "content": "draft from host b\n"})]),
                "drafted",
            ],
        ),
        "editor": llm.script(
            f"editor-{run_id}",
            [
                ToolCalls([("read_file", {"path": REPORT})]),
                ToolCalls(
                    [("edit_file", {"path": REPORT, "oldText": "draft", "newText": "final"})]
                ),
                "edited",
            ],
        ),
        "synth": llm.script(f"synth-{run_id}", ["the answer"]),
    }
    team = team_toml(tmp_path / "team.toml", models)
    state_dir = tmp_path / "state"
    monkeypatch.setenv("TEAMCTL_STATE_DIR", str(state_dir))  # TEAMCTL_WORKSPACE_STORE: auto
    remote_tmp = tmp_path / "host-b-tmp"
    remote_tmp.mkdir()
    with redis_host(two_hosts, llm) as host:
        url = host.loopback_url
        here = LocalWorkers(url, ["here"], 1, tmp_path / "logs")
        coordinator = None
        try:
            with (tmp_path / "remote-worker.log").open("wb") as log:
                host.processes.append(
                    two_hosts.exec(
                        two_hosts.b,
                        worker_command(host.remote_url, ["remote"]),
                        env={**os.environ, "TMPDIR": str(remote_tmp)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            here.start()
            wait_until(
                lambda: len(host.conn.smembers("rq:workers")) == 2,
                60,
                message="a worker on each host",
            )
            coordinator = subprocess.Popen(
                [
                    *TEAMCTL,
                    "run",
                    "Write and edit the report",
                    "--team",
                    str(team),
                    "--api-base",
                    llm.api_base,
                    "--redis-url",
                    url,
                    "--workers",
                    "0",
                    "--run-id",
                    run_id,
                    "--json",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = coordinator.communicate(timeout=180)
            assert coordinator.returncode == 0, err.decode()
            assert json.loads(out)["status"] == "completed"

            # The editor read what the writer wrote on the other host.
            read_result = llm.requests[f"editor-{run_id}"][1]["messages"][-1]["content"]
            assert "draft from host b" in read_result
            files = WorkspaceFiles(host.conn, RunKeys(run_id))
            assert files.contents([REPORT]) == {REPORT: b"final from host b\n"}
            assert files.versions() == {REPORT: 2}
            spec = RunHandle.existing(host.conn, run_id).spec
            assert spec.workspace_store == "redis"
            assert not Path(spec.workspace_dir).exists()  # nothing went through this disk
            # The attempt's copy was removed (the worker's MCP keeper keeps its socket there).
            left = [p for p in remote_tmp.iterdir() if not p.name.startswith("teamctl-mcp-")]
            assert left == []

            listed = subprocess.run(
                [*TEAMCTL, "files", run_id, "--redis-url", url],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert listed.returncode == 0, listed.stderr
            assert listed.stdout == f"18\t2\t{REPORT}\n"  # bytes, version, path
            shown = subprocess.run(
                [*TEAMCTL, "files", run_id, REPORT, "--redis-url", url],
                capture_output=True,
                timeout=60,
            )
            assert shown.stdout == b"final from host b\n"
            exported = subprocess.run(
                [*TEAMCTL, "export", run_id, str(tmp_path / "export"), "--redis-url", url],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert exported.returncode == 0, exported.stderr
            assert (tmp_path / "export" / "workspace" / REPORT).read_text() == (
                "final from host b\n"
            )
        finally:
            here.stop()
            if coordinator is not None:
                stop_process(coordinator)


def test_a_local_workspace_is_refused_by_a_worker_on_another_host(
    two_hosts: TwoHosts,
    llm: ScriptedLLM,
    run_id: str,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = [
        {"id": "a", "memberId": "writer", "task": "draft"},
        {"id": "b", "memberId": "editor", "task": "edit", "dependsOn": ["a"]},
    ]
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        # Neither member makes a call: the writer is refused, the editor waits on it.
        "writer": llm.script(f"writer-{run_id}"),
        "editor": llm.script(f"editor-{run_id}"),
        "synth": llm.script(f"synth-{run_id}", ["no report"]),
    }
    mate = llm.script(f"mate-{team}")
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")
    with redis_host(two_hosts, llm) as host:
        url = host.loopback_url
        here = LocalWorkers(url, ["here"], 1, tmp_path / "logs")  # the planner's calls
        try:
            with (tmp_path / "remote-worker.log").open("wb") as log:
                host.processes.append(
                    two_hosts.exec(
                        two_hosts.b,
                        worker_command(host.remote_url, ["remote"]),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            here.start()
            wait_until(
                lambda: len(host.conn.smembers("rq:workers")) == 2,
                60,
                message="a worker on each host",
            )
            coordinator = subprocess.run(
                [
                    *TEAMCTL,
                    "run",
                    "Write the report",
                    "--team",
                    str(team_toml(tmp_path / "team.toml", models)),
                    "--api-base",
                    llm.api_base,
                    "--redis-url",
                    url,
                    "--workers",
                    "0",
                    "--run-id",
                    run_id,
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=180,
            )

            here_host, there = refused_hosts(f"run {run_id}", coordinator.stderr)
            assert here_host == this_host() and there != here_host
            assert coordinator.returncode == 1, coordinator.stderr
            assert json.loads(coordinator.stdout)["status"] == "failed"
            a = TaskBoard(host.conn, RunKeys(run_id)).get("a")
            assert a is not None and (a.status, a.attempts) == (TaskStatus.FAILED, 1)
            assert refused_hosts(f"run {run_id}", a.error or "") == (here_host, there)
            status = subprocess.run(
                [*TEAMCTL, "status", run_id, "--redis-url", url],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert refused_hosts(f"run {run_id}", status.stdout) == (here_host, there)

            # A teammate's turn, handed to the same worker, is refused the same way.
            assert (
                spawn(
                    url,
                    team,
                    "mate",
                    mate,
                    llm.api_base,
                    "--queue",
                    "remote",
                    "--tool",
                    "write_file",
                ).exit_code
                == 0
            )
            store = TeamStore(redis.Redis.from_url(url, decode_responses=True), team)
            wait_until(
                lambda: store.get("mate").status is TeammateStatus.IDLE,
                60,
                message="the teammate's refused turn",
            )
            assert refused_hosts(f"team {team}", store.get("mate").last_error or "") == (
                here_host,
                there,
            )
        finally:
            here.stop()


def refused_hosts(owner: str, text: str) -> tuple[str, str]:
    """The two hosts the refusal line in `text` names, once it names `owner` and the fix."""
    found = re.search(
        rf"{re.escape(owner)} keeps its files in a directory on host (\S+), and "
        r"this worker is on host (\S+): refused, or its files would split; runs "
        r"and teams created with TEAMCTL_WORKSPACE_STORE=redis share files across "
        r"hosts",
        text,
    )
    assert found, text
    return found[1], found[2]


@pytest.mark.realistic
def test_a_workspace_in_redis_at_the_default_options_with_slow_calls(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "redis")
    plan = [
        {"id": "a", "memberId": "writer", "task": "draft"},
        {"id": "b", "memberId": "editor", "task": "edit", "dependsOn": ["a"]},
    ]
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)], latency_s=scaled(5)),
        "writer": llm.script(
            f"writer-{run_id}",
            [ToolCalls([("write_file", {"path": REPORT, "content": "a slow draft\n"})]), "drafted"],
            latency_s=scaled(6),
        ),
        "editor": llm.script(
            f"editor-{run_id}",
            [
                ToolCalls(
                    [("edit_file", {"path": REPORT, "oldText": "draft", "newText": "report"})]
                ),
                "edited",
            ],
            latency_s=scaled(6),
        ),
        "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=scaled(5)),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        options=timing_options(),
        members=[
            {"id": "writer", "model": models["writer"], "tools": ["write_file"]},
            {"id": "editor", "model": models["editor"], "tools": ["edit_file"]},
        ],
    )

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "completed"
    files = WorkspaceFiles(redis.Redis.from_url(workers), RunKeys(run_id))
    assert files.contents([REPORT]) == {REPORT: b"a slow report\n"}
