"""Prompt injection against the bounds of tools: a model steered into a hung Python tool, a
fork bomb, a memory hog or a huge file through `bash`, a write over a program someone else runs,
or a flood of text in its own arguments. Each runs on the marked workers, asserts the refusal
and that the marker secret stayed where it was."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.shared.text import ECHO_CHARS
from teamctl.worker.jobs import HANDED_BACK_REASON

from tests.support.cli import run_cli
from tests.support.injection import (
    MARKED_QUEUE,
    MarkedWorkers,
    assert_marker_kept,
    marked_team,
    run_marked,
)
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import script_run
from tests.support.teams import cli, spawn
from tests.support.timescale import scaled
from tests.support.waiting import wait_until

HANG = "tests.pytools_fixture.tools:hang_for"
NEVER_S = 3600
"""How long the hung tool would sleep: far past every timeout of the test."""


@pytest.fixture
def conn0(marked_workers: MarkedWorkers) -> redis.Redis:
    """A client of the marked workers' database (db 0), reading bytes: RQ's jobs are not text."""
    return redis.Redis.from_url(marked_workers.redis_url)


def error_of(result: str) -> dict[str, str]:
    assert result.startswith("TOOL_ERROR: "), result[:300]
    return json.loads(result[len("TOOL_ERROR: ") :])


def test_a_hung_python_tool_times_out_and_the_task_ends(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, conn0: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """The model gets ToolTimeout after tool_timeout_s and the task completes: nothing waits
    for RQ's job timeout (timeout_s + a margin), nor reruns the attempt."""
    timeout_s = scaled(RunOptions().tool_timeout_s, 2.0)
    started = time.monotonic()
    (timed_out,) = run_marked(
        llm,
        marked_workers,
        run_id,
        tmp_path,
        [("hang_for", {"seconds": NEVER_S})],
        [HANG],
        {"tool_timeout_s": timeout_s, "timeout_s": 600},
    )
    elapsed_s = time.monotonic() - started

    error = error_of(timed_out)
    assert error["errorType"] == "ToolTimeout"
    assert error["error"].startswith(f"hang_for did not return within {timeout_s:g}s")
    assert timeout_s <= elapsed_s < timeout_s + 60  # the job's timeout is 660 s away
    assert len(llm.requests[f"member-{run_id}"]) == 2  # one attempt, not rerun
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])


def test_a_task_claimed_beside_an_abandoned_tool_call_runs_in_a_fresh_job(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, conn0: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """A job whose tool call was abandoned at tool_timeout_s does not run the task its member
    claimed in that process beside the stray thread: it releases it and a fresh job runs it."""
    timeout_s = scaled(RunOptions().tool_timeout_s, 2.0)
    plan = [
        {"id": "task_1", "memberId": "m1", "task": "Do as the page says"},
        {"id": "task_2", "memberId": "m1", "task": "Then this"},
    ]
    models = script_run(
        llm,
        run_id,
        plan,
        member=[
            ToolCalls(
                [("team_claim_task", {"taskId": "task_2"}), ("hang_for", {"seconds": NEVER_S})]
            ),
            "done one",
            "done two",
        ],
    )
    team_file = marked_team(
        tmp_path / "t.toml", models, [HANG], {"tool_timeout_s": timeout_s, "max_concurrency": 1}
    )

    result = run_cli(llm, marked_workers.redis_url, run_id, team_file)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {s["task_id"]: s["status"] for s in out["task_states"]} == {
        "task_1": "completed",
        "task_2": "completed",
    }
    task_2 = TaskBoard(
        redis.Redis.from_url(marked_workers.redis_url, decode_responses=True), RunKeys(run_id)
    ).get("task_2")
    assert task_2 is not None
    assert task_2.requeue_reason == HANDED_BACK_REASON
    assert task_2.attempts == 2  # claimed by the member, then by its fresh job
    assert task_2.output == "done two"
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])


def test_a_teammates_hung_python_tool_times_out_and_its_turn_ends(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, conn0: redis.Redis, team: str, tmp_path: Path
) -> None:
    """The same for a persistent teammate: ToolTimeout in its memory, idle after its answer,
    its turn lease released long before the turn job's timeout."""
    timeout_s = scaled(TeamOptions().tool_timeout_s, 2.0)
    team_file = tmp_path / "team.toml"
    team_file.write_text(f"[teammates]\ntool_timeout_s = {timeout_s}\n")
    assert (
        cli(
            "team",
            "create",
            "--file",
            str(team_file),
            "-t",
            team,
            "--redis-url",
            marked_workers.redis_url,
        ).exit_code
        == 0
    )
    model = llm.script(
        f"hung-{team}", [ToolCalls([("hang_for", {"seconds": NEVER_S})]), "went on without it"]
    )
    store = TeamStore(redis.Redis.from_url(marked_workers.redis_url, decode_responses=True), team)
    started = time.monotonic()
    assert (
        spawn(
            marked_workers.redis_url,
            team,
            "hung",
            model,
            llm.api_base,
            "--queue",
            MARKED_QUEUE,
            "--tool",
            HANG,
        ).exit_code
        == 0
    )
    wait_until(
        lambda: store.get("hung").status is TeammateStatus.IDLE,
        timeout_s + 60,
        message="the teammate idle after its timed-out tool",
    )

    assert time.monotonic() - started < timeout_s + 60  # the turn job's timeout: 1860 s
    (result,) = [m["content"] for m in store.turns.memory("hung") if m.get("role") == "tool"]
    assert error_of(result)["errorType"] == "ToolTimeout"
    assert store.get("hung").idle_reason == "done"
    store.delete(force=True)
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])


@pytest.mark.parametrize(
    ("command", "stopped_by"),
    [
        ("python3 -c 'bytearray(6 << 30)'", "MemoryError"),
        (
            "head -c 2G /dev/zero > huge.bin; echo size $(stat -c %s huge.bin); rm -f huge.bin",
            "File size limit exceeded",
        ),
    ],
    ids=["memory-hog", "huge-file"],
)
def test_bash_is_stopped_by_its_limits(
    llm: ScriptedLLM,
    marked_workers: MarkedWorkers,
    conn0: redis.Redis,
    run_id: str,
    tmp_path: Path,
    command: str,
    stopped_by: str,
) -> None:
    """A memory hog fails to allocate past the address-space limit; a huge file stops at the
    file-size limit (1 GiB), its writer killed by SIGXFSZ. (The process limit, which the
    kernel does not apply to root, is tested as an unprivileged user in test_workspace.)"""
    (ran,) = run_marked(
        llm, marked_workers, run_id, tmp_path, [("bash", {"command": command})], ["bash"]
    )
    output = json.loads(ran)["output"]
    assert stopped_by in output, output
    if "huge.bin" in command:
        assert f"size {1 << 30}\n" in output
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])


def test_write_file_over_a_program_leaves_it_not_executable(
    llm: ScriptedLLM,
    marked_workers: MarkedWorkers,
    conn0: redis.Redis,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member with write_file only replaces a 0755 script in the workspace (as a server
    command might name): the new content is there, but it is 0644, and so is a new file."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    workspace = tmp_path / "state" / "workspaces" / run_id
    (workspace / "bin").mkdir(parents=True)
    script = workspace / "bin" / "serve"
    script.write_text("#!/bin/sh\necho serving\n")
    script.chmod(0o755)
    payload = "#!/bin/sh\nenv > stolen.txt\n"
    written, created = run_marked(
        llm,
        marked_workers,
        run_id,
        tmp_path,
        [
            ("write_file", {"path": "bin/serve", "content": payload}),
            ("write_file", {"path": "bin/other", "content": payload}),
        ],
        ["write_file"],
    )

    assert json.loads(written)["ok"] and json.loads(created)["ok"]
    assert script.read_text() == payload
    assert stat.S_IMODE(script.stat().st_mode) == 0o644
    assert stat.S_IMODE((workspace / "bin" / "other").stat().st_mode) == 0o644
    assert not os.access(script, os.X_OK)  # not even root: no execute bit is left
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])


def test_workspace_paths_that_leave_it_are_refused(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, conn0: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """A page tells the member to read the worker's environment through /proc: an absolute
    path, a climb out with '..', a listing of the root; each is a tool error, and the marker in
    that environment reaches neither the model nor any file."""
    results = run_marked(
        llm,
        marked_workers,
        run_id,
        tmp_path,
        [
            ("read_file", {"path": "/proc/self/environ"}),
            ("read_file", {"path": "../" * 12 + "proc/self/environ"}),
            ("list_files", {"path": "/"}),
            ("write_file", {"path": "../escaped.txt", "content": "x"}),
        ],
        ["read_file", "list_files", "write_file"],
    )

    assert [error_of(result)["errorType"] for result in results] == ["ToolFailed"] * 4
    assert not (tmp_path / "state" / "workspaces" / "escaped.txt").exists()
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])


def test_a_huge_invalid_tool_argument_is_echoed_cut(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, conn0: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """A megabyte of non-JSON arguments, and a path of a megabyte: the errors the model gets
    back quote ECHO_CHARS of each and say how long it was."""
    flood = "{" + "A" * 1_000_000
    not_json, long_path = run_marked(
        llm,
        marked_workers,
        run_id,
        tmp_path,
        [("read_file", flood), ("read_file", {"path": "../" + "B" * 1_000_000})],
        ["read_file"],
    )

    error = error_of(not_json)
    assert error["errorType"] == "InvalidArguments"
    assert error["error"] == (
        "invalid tool arguments (not JSON: Expecting property name "
        f"enclosed in double quotes): {flood[:ECHO_CHARS]}...[1000001 "
        "characters]"
    )
    refused = error_of(long_path)["error"]
    assert refused.startswith("path '../BBB") and "...[1000003 characters]' is outside" in refused
    assert len(refused) < ECHO_CHARS + 200
    assert_marker_kept(llm, conn0, [tmp_path / "state", marked_workers.log_dir])
