"""MCP sessions a worker keeps warm: a run's next attempt on the same worker reuses its server
(same pid) and another run gets its own, a session closes when its run ends, when idle for
mcp_idle_s and when the worker stops, a killed server is started again once with the call
retried, a teammate's next turn reuses its server until the team is deleted, and npx/uvx
downloads persist in the worker's package caches, which `bash` is not told of. Real `rq worker`
processes of the module's own (one: every attempt meets the same keeper), the SDK-written stdio
server of tests/mcp_fixture, a tiny npm package packed here and a tiny Python one built into a
wheel here. A workspace kept in Redis is copied where its servers stay warm too."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts, call_result_text
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskState
from teamctl.shared.team_file import Member
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus, team_workspace
from teamctl.shared.workspace.redis_files import WorkspaceFiles
from teamctl.worker.mcp_warm.client import kept_workspace_root
from teamctl.worker.mcp_warm.protocol import KEEPER_ENV, WORKSPACES_DIR, Scope

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.mcp import end_run, processes_in, stored_run, tiny_uv_wheel
from tests.support.replies import tool_results
from tests.support.teams import cli, spawn
from tests.support.waiting import wait_until
from tests.support.workers import (
    children,
    parent_pid,
    spare_warmed,
    warm_fork_worker,
    workers_on_own_queue,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
QUEUE = "mcp-warm"
INDEX = McpServer(
    name="index",
    command=[sys.executable, "-m", "tests.mcp_fixture.stdio_server"],
    env={"PYTHONPATH": str(REPO_ROOT)},
)
LOOKUP = ToolCalls([("index__lookup", {"term": "lease"})])


@pytest.fixture(scope="module")
def one_worker(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One worker of this module's own: a run's attempts all meet the same keeper."""
    with workers_on_own_queue(redis_server, QUEUE, 1, tmp_path_factory.mktemp("warm-logs")):
        yield redis_server


def new_run_id() -> str:
    return f"warm{uuid.uuid4().hex[:10]}"


def attempt(url: str, run_id: str, task_id: str, *, queue: str = QUEUE) -> str:
    """Run one task of the run as a job on the module's worker (or `queue`'s); the job's
    summary."""
    job = Queue(queue, connection=redis.Redis.from_url(url)).enqueue(
        "teamctl.worker.jobs.run_task", run_id, task_id
    )
    wait_until(
        lambda: job.get_status(refresh=True) in ("finished", "failed"),
        60,
        message=f"{task_id} of {run_id} to be run",
    )
    assert job.get_status() == "finished", job.latest_result()
    return str(job.return_value())


def lookup_run(
    url: str,
    llm: ScriptedLLM,
    workspace: Path,
    tasks: int = 1,
    latency_s: float = 0.0,
    **options: Any,
) -> str:
    """A stored run whose member calls index__lookup in each of its `tasks` attempts (each
    model call answered after `latency_s`)."""
    run_id = new_run_id()
    model = llm.script(f"m1-{run_id}", [LOOKUP, "looked up"] * tasks, latency_s=latency_s)
    member = Member(id="m1", mcp=["index"], mcp_servers=[INDEX])
    conn = redis.Redis.from_url(url, decode_responses=True)
    stored_run(conn, run_id, model, llm.api_base, workspace, member, tasks, **options)
    return run_id


def in_kept_copy(scope: Scope) -> list[tuple[int, Path]]:
    """The processes (pid, working directory) working in a worker's kept copy of the run's
    (team's) workspace kept in Redis."""
    kept = kept_workspace_root({KEEPER_ENV: "keeper.sock"}, scope)
    assert kept is not None
    name = kept.name
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = Path(os.readlink(entry / "cwd")) if entry.name.isdigit() else None
        except OSError:
            continue
        if cwd is not None and cwd.name == name and cwd.parent.name == WORKSPACES_DIR:
            found.append((int(entry.name), cwd))
    return found


def looked_up(llm: ScriptedLLM, run_id: str) -> list[str]:
    """What each attempt's lookup answered, as the model read it."""
    return [tool_results(r)[0] for r in llm.requests[f"m1-{run_id}"][1::2]]


def test_a_run_s_next_attempt_reuses_its_server_and_another_run_gets_its_own(
    one_worker: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """Same run, same worker: the second attempt calls the server the first started (one
    process, same pid). Another run in the same directory gets a second server: sessions are
    never shared between runs. Each closes when its run ends."""
    conn = redis.Redis.from_url(one_worker, decode_responses=True)
    workspace = (tmp_path / "ws").resolve()
    first_run = lookup_run(one_worker, llm, workspace, tasks=2)
    other_run = lookup_run(one_worker, llm, workspace)

    assert attempt(one_worker, first_run, "task_1") == "task_1: completed"
    (server,) = processes_in(workspace)
    assert attempt(one_worker, first_run, "task_2") == "task_2: completed"
    assert processes_in(workspace) == [server]
    assert attempt(one_worker, other_run, "task_1") == "task_1: completed"
    servers = processes_in(workspace)
    assert len(servers) == 2 and server in servers
    assert looked_up(llm, first_run) == ["lease: 3 documents"] * 2
    assert looked_up(llm, other_run) == ["lease: 3 documents"]

    end_run(conn, first_run)
    wait_until(
        lambda: processes_in(workspace) == [s for s in servers if s != server],
        20,
        message="the ended run's server to stop, the other's to stay",
    )
    end_run(conn, other_run)
    wait_until(lambda: processes_in(workspace) == [], 20, message="the other run's server to stop")


def test_a_run_s_workspace_kept_in_redis_is_copied_where_its_server_stays_warm(
    one_worker: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """Workers on hosts that share no disk copy the workspace: each attempt into the same
    directory of the worker's (the shared files there while it runs, nothing after it), so the
    server the first started serves the second too, in that directory. The directory goes when
    the run ends, with the server."""
    conn = redis.Redis.from_url(one_worker, decode_responses=True)
    run_id = lookup_run(
        one_worker, llm, tmp_path / "unused", tasks=2, latency_s=0.5, workspace_store="redis"
    )
    scope = Scope(kind="run", id=run_id)
    WorkspaceFiles(conn, RunKeys(run_id)).save("notes.md", 0, b"shared")
    queue = Queue(QUEUE, connection=redis.Redis.from_url(one_worker))

    servers = []
    for task in ("task_1", "task_2"):
        job = queue.enqueue("teamctl.worker.jobs.run_task", run_id, task)
        wait_until(
            lambda: (
                [p.read_bytes() for _, cwd in in_kept_copy(scope) for p in cwd.iterdir()]
                == [b"shared"]
            ),
            30,
            message=f"{task}'s copy of the workspace, with its server working in it",
        )
        wait_until(lambda job=job: job.get_status(refresh=True) == "finished", 60, message=task)
        ((server, copy),) = in_kept_copy(scope)
        assert stat.S_IMODE(copy.stat().st_mode) == 0o700
        assert list(copy.iterdir()) == []  # the attempt's copy went with it
        servers.append(server)
    assert servers[0] == servers[1]
    assert looked_up(llm, run_id) == ["lease: 3 documents"] * 2

    end_run(conn, run_id)
    wait_until(
        lambda: in_kept_copy(scope) == [] and not copy.exists(),
        20,
        message="the ended run's server to stop and its copy to go",
    )


def test_a_kept_copy_goes_with_its_idle_server_while_the_run_goes_on(
    one_worker: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """A worker's copy of a workspace kept in Redis lives as long as a server works in it: once
    the session went unused for mcp_idle_s, the copy goes too, though the run goes on."""
    conn = redis.Redis.from_url(one_worker, decode_responses=True)
    run_id = lookup_run(
        one_worker,
        llm,
        tmp_path / "unused",
        latency_s=0.5,
        workspace_store="redis",
        mcp_idle_s=1,
    )
    scope = Scope(kind="run", id=run_id)
    queue = Queue(QUEUE, connection=redis.Redis.from_url(one_worker))

    job = queue.enqueue("teamctl.worker.jobs.run_task", run_id, "task_1")
    wait_until(lambda: in_kept_copy(scope) != [], 30, message="the attempt's server to start")
    ((_, copy),) = in_kept_copy(scope)
    wait_until(lambda: job.get_status(refresh=True) == "finished", 60, message="task_1")
    wait_until(
        lambda: in_kept_copy(scope) == [] and not copy.exists(),
        20,
        message="the idle server to stop and its copy to go",
    )
    assert not RunStore(conn, RunKeys(run_id)).state().finished
    end_run(conn, run_id)


def test_a_worker_s_first_task_runs_in_the_spare_forked_before_its_keeper_and_meets_it(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    """The keeper is forked for a worker's first member task; the spare waiting since before
    (warmed while the worker was idle) still runs that task, and is told where the keeper is
    with its job: the task's server is the keeper's child, and the run's next task reuses it.
    A server of the test's own, whose only PING is the spare's warm-up."""
    queue = f"first-{uuid.uuid4().hex[:8]}"
    workspace = (tmp_path / "ws").resolve()
    with throwaway_redis() as url:
        conn = redis.Redis.from_url(url, decode_responses=True)
        run_id = lookup_run(url, llm, workspace, tasks=2)
        with warm_fork_worker(url, queue, tmp_path / "worker.log") as worker:
            spare_warmed(conn)  # else the first task may not wait for it, and is forked
            (spare,) = children(worker.pid)  # no keeper yet: it comes with the first task

            first = attempt(url, run_id, "task_1", queue=queue)
            (server,) = processes_in(workspace)
            keeper = parent_pid(server)
            second = attempt(url, run_id, "task_2", queue=queue)

            assert (first, second) == ("task_1: completed", "task_2: completed")
            ran_in = {task.worker for task in stored_tasks(url, run_id)}
            assert ran_in == {f"{socket.gethostname()}:{spare}"}
            assert keeper not in (spare, worker.pid) and parent_pid(keeper) == worker.pid
            assert processes_in(workspace) == [server]
            assert looked_up(llm, run_id) == ["lease: 3 documents"] * 2
        end_run(conn, run_id)


def stored_tasks(url: str, run_id: str) -> list[TaskState]:
    return TaskBoard(redis.Redis.from_url(url, decode_responses=True), RunKeys(run_id)).snapshot()


def test_a_session_unused_for_mcp_idle_s_closes_while_its_run_goes_on(
    one_worker: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(one_worker, decode_responses=True)
    workspace = (tmp_path / "ws").resolve()
    run_id = lookup_run(one_worker, llm, workspace, mcp_idle_s=1)

    assert attempt(one_worker, run_id, "task_1") == "task_1: completed"
    wait_until(lambda: processes_in(workspace) == [], 20, message="the idle server to stop")
    assert not RunStore(conn, RunKeys(run_id)).state().finished
    end_run(conn, run_id)


def test_a_killed_server_is_started_again_for_the_run_s_next_attempt(
    one_worker: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(one_worker, decode_responses=True)
    workspace = (tmp_path / "ws").resolve()
    run_id = lookup_run(one_worker, llm, workspace, tasks=2)

    assert attempt(one_worker, run_id, "task_1") == "task_1: completed"
    (killed,) = processes_in(workspace)
    os.kill(killed, signal.SIGKILL)
    assert attempt(one_worker, run_id, "task_2") == "task_2: completed"
    (restarted,) = processes_in(workspace)
    assert restarted != killed
    assert looked_up(llm, run_id) == ["lease: 3 documents"] * 2
    end_run(conn, run_id)
    wait_until(lambda: processes_in(workspace) == [], 20, message="the server to stop")


def test_a_server_killed_between_calls_is_started_again_once_and_the_call_retried(
    tmp_path: Path,
) -> None:
    with McpHub(tmp_path, McpTimeouts(30, 30, 10)) as hub:
        hub.start(INDEX)
        killed = hub.pid("index")
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: not hub.alive("index"), 10, message="the server to be seen dead")

        answer = call_result_text(hub.call("index", "lookup", {"term": "lease"}), 1000)

        assert answer == "lease: 3 documents"
        assert hub.pid("index") not in (None, killed)


def test_stopping_the_worker_closes_its_sessions(
    redis_server: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    workspace = (tmp_path / "ws").resolve()
    run_id = lookup_run(redis_server, llm, workspace)
    with workers_on_own_queue(redis_server, "mcp-warm-stop", 1, tmp_path / "logs") as group:
        job = Queue("mcp-warm-stop", connection=redis.Redis.from_url(redis_server)).enqueue(
            "teamctl.worker.jobs.run_task", run_id, "task_1"
        )
        wait_until(lambda: job.get_status(refresh=True) == "finished", 60, message="the task")
        assert len(processes_in(workspace)) == 1
        assert [p.poll() for p in group.processes] == [None]
    # The run has not ended: only the worker's stop (its teardown) closed the session.
    wait_until(lambda: processes_in(workspace) == [], 20, message="the server to stop")
    end_run(redis.Redis.from_url(redis_server, decode_responses=True), run_id)


def test_servers_share_the_worker_s_package_caches_which_bash_is_not_told_of(
    one_worker: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """npm's and uv's caches: one 0700 directory of the worker's, outside the workspace and
    the server's HOME, the same for another run's server (so what one downloaded, the next
    finds); `bash` in the same attempt is not given them, and its HOME holds nothing."""
    conn = redis.Redis.from_url(one_worker, decode_responses=True)
    runs, told = [], []
    for _ in range(2):
        run_id = new_run_id()
        workspace = (tmp_path / run_id).resolve()
        model = llm.script(
            f"m1-{run_id}",
            [
                ToolCalls(
                    [
                        ("index__environment", {}),
                        ("bash", {"command": 'env; echo "home:$HOME"; ls -A "$HOME"'}),
                    ]
                ),
                "told",
            ],
        )
        member = Member(id="m1", tools=["bash"], mcp=["index"], mcp_servers=[INDEX])
        stored_run(conn, run_id, model, llm.api_base, workspace, member)
        assert attempt(one_worker, run_id, "task_1") == "task_1: completed"
        server, bash = tool_results(llm.requests[f"m1-{run_id}"][1])
        runs.append((run_id, workspace))
        told.append((json.loads(server)["env"], bash))

    (first_env, first_bash), (second_env, second_bash) = told
    npm, uv = Path(first_env["npm_config_cache"]), Path(first_env["UV_CACHE_DIR"])
    assert (second_env["npm_config_cache"], second_env["UV_CACHE_DIR"]) == (str(npm), str(uv))
    root = npm.parent
    assert uv.parent == root and root.parent.name == "mcp-caches"
    for directory in (root, npm, uv):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for env, (_, workspace) in zip((first_env, second_env), runs, strict=True):
        assert not root.is_relative_to(workspace)
        assert not root.is_relative_to(Path(env["HOME"]))
    for bash in (first_bash, second_bash):
        assert str(root) not in bash
        assert "npm_config_cache" not in bash and "UV_CACHE_DIR" not in bash
    for run_id, workspace in runs:
        end_run(conn, run_id)
        wait_until(lambda w=workspace: processes_in(w) == [], 20, message="the servers to stop")


def packed_tiny_server(tmp_path: Path) -> Path:
    """`npm pack` of tests/mcp_fixture/tiny_npm into `tmp_path`: the tarball's path."""
    subprocess.run(
        ["npm", "pack", "--pack-destination", str(tmp_path)],
        cwd=REPO_ROOT / "tests" / "mcp_fixture" / "tiny_npm",
        check=True,
        capture_output=True,
        env={**os.environ, "npm_config_cache": str(tmp_path / "pack-cache")},
    )
    (tarball,) = tmp_path.glob("tiny-mcp-*.tgz")
    return tarball


def started_twice(server: McpServer, tmp_path: Path, caches: Path, installed: str) -> list[str]:
    """Start the tiny `server` in two attempts' hubs (each its own HOME) that share the
    worker's `caches`, checking that the second ran the file the first installed (the one
    `installed` matches under the caches: same inode, same mtime); each start's pid."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    installs = []
    pids = []
    for _ in range(2):
        with McpHub(workspace, McpTimeouts(60, 30, 10), package_caches=caches) as hub:
            assert [tool.name for tool in hub.start(server)] == ["pid"]
            pids.append(call_result_text(hub.call("tiny", "pid", {}), 100))
        (found,) = caches.glob(installed)
        info = found.stat()
        installs.append((found, info.st_ino, info.st_mtime_ns))
    assert installs[0] == installs[1]
    return pids


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed here")
def test_an_npx_server_is_installed_once_for_two_attempts(tmp_path: Path) -> None:
    """Two attempts' hubs (each its own HOME) start the same npx server with the worker's
    caches: the first installs the package from the tarball, the second runs that install
    (npm_config_offline: the network is never asked)."""
    tarball = packed_tiny_server(tmp_path)
    caches = tmp_path / "state" / "mcp-caches" / "host-1"
    server = McpServer(
        name="tiny",
        command=["npx", "-y", "--package", str(tarball), "tiny-mcp"],
        env={"npm_config_offline": "true", "npm_config_update_notifier": "false"},
    )
    pids = started_twice(server, tmp_path, caches, "npm/_npx/*/node_modules/tiny-mcp/index.js")
    tarballs = [p for p in (caches / "npm" / "_cacache" / "content-v2").rglob("*") if p.is_file()]
    assert len(tarballs) == 1
    assert pids[0] != pids[1]


UVX = shutil.which("uvx", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(UVX is None, reason="uv is not installed in this environment")
def test_a_uvx_server_is_installed_once_for_two_attempts(tmp_path: Path) -> None:
    """Two attempts' hubs (each its own HOME) start the same uvx server with the worker's
    caches: the first installs the wheel into an environment in UV_CACHE_DIR, the second runs
    that environment (--offline: the network is never asked)."""
    wheel = tiny_uv_wheel(tmp_path)
    caches = tmp_path / "state" / "mcp-caches" / "host-1"
    assert UVX is not None
    server = McpServer(
        name="tiny",
        command=[UVX, "--offline", "--python", sys.executable, "--from", str(wheel), "tiny-mcp-py"],
    )
    pids = started_twice(
        server, tmp_path, caches, "uv/*/*/lib/python*/site-packages/tiny_mcp_py/__init__.py"
    )
    assert pids[0] != pids[1]


@pytest.mark.parametrize("workspace_store", ["local", "redis"])
def test_a_teammate_s_next_turn_reuses_its_server_until_the_team_is_deleted(
    one_worker: str,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workspace_store: str,
) -> None:
    """Persistent teammates: the server a turn started in the team's directory (or in the
    worker's copy of a workspace kept in Redis) answers the next turn (same pid), and stops
    once the team is deleted."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", workspace_store)
    base = ["-t", team, "--redis-url", one_worker]
    team_path = tmp_path / "team.json"
    team_path.write_text(json.dumps({"mcp_servers": [INDEX.model_dump(exclude_none=True)]}))
    assert cli("team", "create", *base, "--file", str(team_path)).exit_code == 0
    workspace = team_workspace(Path(os.environ["TEAMCTL_STATE_DIR"]), team).resolve()
    model = llm.script(f"indexer-{team}", [LOOKUP, "looked up"] * 2)
    store = TeamStore(redis.Redis.from_url(one_worker, decode_responses=True), team)

    def turns_done(count: int) -> bool:
        return (
            len(llm.requests[f"indexer-{team}"]) == 2 * count
            and store.get("indexer").status is TeammateStatus.IDLE
        )

    spawned = spawn(
        one_worker, team, "indexer", model, llm.api_base, "--queue", QUEUE, "--mcp", "index"
    )
    assert spawned.exit_code == 0, spawned.output
    scope = Scope(kind="team", id=team, created_ms=store.meta().created_ms)

    def servers() -> list[int]:
        if workspace_store == "local":
            return processes_in(workspace)
        return [pid for pid, _ in in_kept_copy(scope)]

    wait_until(lambda: turns_done(1), 60, message="the first turn")
    (server,) = servers()
    assert cli("team", "send", "indexer", "Look it up again", *base).exit_code == 0
    wait_until(lambda: turns_done(2), 60, message="the second turn")

    assert servers() == [server]
    requests = llm.requests[f"indexer-{team}"]
    assert [tool_results(requests[n])[-1] for n in (1, 3)] == ["lease: 3 documents"] * 2
    copies = {cwd for _, cwd in in_kept_copy(scope)}
    assert len(copies) == (0 if workspace_store == "local" else 1)
    assert cli("team", "delete", *base).exit_code == 0
    wait_until(
        lambda: servers() == [] and not any(c.exists() for c in copies),
        20,
        message="the server to stop and the worker's copy to go",
    )
