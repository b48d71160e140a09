"""Runs stored in Redis without a coordinator process: for a worker's execute_task, for the CLI's
read-only verbs, and a bus or store of a run as its coordinator would hold them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from teamctl.coordinator.runs.run import RunRequest, create_run
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease
from teamctl.shared.roster import write_roster
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member, load_team_file


def make_run(
    conn: redis.Redis,
    run_id: str,
    *,
    models: dict[str, str],
    tasks: list[TaskSpec],
    workspace: Path,
    api_base: str,
    tools: dict[str, list[str]] | None = None,
    objective: str = "Test the worker",
    **options: Any,
) -> RunSpec:
    """Store a run spec with one member per entry of `models` and create its board."""
    members = [
        Member(
            id=member_id,
            name=f"Member {member_id}",
            model=model,
            tools=(tools or {}).get(member_id, []),
        )
        for member_id, model in models.items()
    ]
    workspace.mkdir(parents=True, exist_ok=True)
    first = next(iter(models.values()))
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective=objective,
        members=members,
        options=RunOptions(**options),
        models=ModelChoice(
            planner=first, synthesizer=first, member_default=first, api_base=api_base
        ),
        workspace_dir=str(workspace),
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(tasks)
    return spec


def two_task_run(conn: redis.Redis, run_id: str, tmp_path: Path, **options: object) -> None:
    """A run with a two-task board and one message, as a coordinator would leave it."""
    planned_run(
        conn,
        run_id,
        tmp_path,
        [
            TaskSpec(id="a", member_id="researcher", task="A"),
            TaskSpec(id="b", member_id="writer", task="B", depends_on=["a"]),
        ],
        **options,
    )
    MessageBus(conn, RunKeys(run_id)).publish("system", "researcher", "task.assigned", "a", "A")


def planned_run(
    conn: redis.Redis, run_id: str, tmp_path: Path, tasks: list[TaskSpec], **options: object
) -> TaskBoard:
    """A run of the default team (objective "Objective X") whose board holds `tasks`."""
    team = load_team_file(None).model_copy(update={"options": RunOptions(**options)})
    models = ModelChoice(planner="p", synthesizer="s", member_default="m")
    create_run(
        conn,
        RunRequest(
            objective="Objective X",
            team=team,
            models=models,
            workspace_root=tmp_path,
            run_id=run_id,
        ),
    )
    board = TaskBoard(conn, RunKeys(run_id))
    board.create(tasks)
    return board


def coordinator_store(conn: redis.Redis, run_id: str) -> RunStore:
    """A RunStore that holds the run's lease (an hour, no renewal), as a coordinator's does."""
    lease = Lease(conn, RunKeys(run_id), ttl_s=3600)
    assert lease.try_acquire(), f"run {run_id} already has a coordinator"
    return RunStore(conn, RunKeys(run_id), lease.owner)


def store_run(conn: redis.Redis, run_id: str, **options: Any) -> RunStore:
    """A running run of m1..m3 (its roster written by create) with the lease held, no workers."""
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective="o",
        members=[Member(id=m) for m in ("m1", "m2", "m3")],
        options=RunOptions(**options),
        models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
        workspace_dir="/tmp",
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    store = coordinator_store(conn, run_id)
    store.set_status("running")
    return store


def roster_bus(conn: redis.Redis, run_id: str, member_ids: list[str], **options: Any) -> MessageBus:
    """A bus of a run with no spec: its roster written first, as creating a run writes it."""
    keys = RunKeys(run_id)
    write_roster(conn, keys, member_ids)
    return MessageBus(conn, keys, **options)


def token_number(token: str) -> int:
    """The counter part of a fencing token (N@EPOCH)."""
    return int(token.split("@")[0])


def next_token(token: str) -> str:
    """The token the board issues after `token` within the same server epoch."""
    number, _, epoch = token.partition("@")
    return f"{int(number) + 1}@{epoch}"
