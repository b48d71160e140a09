"""Bounded hand-offs: a team task two teammates never finish goes back to the board at most
max_task_releases times, then fails with who gave it up as its error; the lead is told once and
the model calls stop. Real Redis, the session's real workers on `members`, the scripted model."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.envelopes import SystemType
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.worker.runs.member_tools import release_reason

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teamfile import team_file
from tests.support.teams import Doer, Stubborn, add, all_idle, cli, spawn, task
from tests.support.waiting import wait_until
from tests.support.workers import workers_idle

CALLS_PER_HOLD = 2
"""A stubborn holder's model calls per hold: the claim's turn, then the reminder's."""


def calls(llm: ScriptedLLM, name: str) -> int:
    """The model calls the scripted model `name` answered."""
    return len(llm.requests[name])


def run_one_member(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    tmp_path: Path,
    plan: dict[str, Any],
    member: Any,
    *flags: str,
) -> Result:
    """`teamctl run --json` of a one-member team (m1, answered by the handler `member`) on the
    session's workers, with `flags`."""
    team = team_file(
        tmp_path / "team.toml",
        {
            "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
            "synth": llm.script(f"synth-{run_id}", ["the synthesis"]),
        },
        team_id="tools",
        members=[{"id": "m1", "model": llm.script(f"m1-{run_id}", handler=member)}],
    )
    return CliRunner().invoke(
        main,
        [
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            redis_url,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
            *flags,
        ],
    )


def test_a_task_two_teammates_never_finish_fails_after_max_task_releases(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    stubborn = f"stubborn-{team}"
    model = llm.script(stubborn, handler=Stubborn())
    for name in ("a", "b"):
        assert spawn(workers, team, name, model, llm.api_base).exit_code == 0
        wait_until(lambda: workers_idle(workers), message=f"{name}'s first turn")
    wait_until(lambda: all_idle(store, 2), message="a and b idle")
    first_turns = calls(llm, stubborn)
    assert first_turns == 2
    # The one idle longest takes it first: whichever first turn ended first (the workers may
    # run the two at once).
    seen = {m.name: m.last_seen_ms for m in store.teammates()}
    first, second = sorted(("a", "b"), key=lambda name: (seen[name], name))
    task_id = add(workers, team, "Fix the build")
    after = add(workers, team, "Ship it", "--after", task_id)
    wait_until(
        lambda: (
            task(store, task_id).status is TaskStatus.FAILED
            and all_idle(store, 2)
            and workers_idle(workers)
        ),
        60,
        message="the task to fail past its bound",
    )
    failed = task(store, task_id)
    # Three releases (first, second, first), then second gives it up a fourth time: it fails.
    assert failed.releases == TeamOptions().max_task_releases == 3
    assert failed.released_by == [first, second, first, second]
    assert failed.error == (
        "released 3 times (max_task_releases), given up in turn by "
        f"{first}, {second}, {first}, {second}"
    )
    assert failed.owner is None and failed.attempts == 4
    assert task(store, after).status is TaskStatus.PENDING
    notices = store.messages.notices(SystemType.TASK_FAILED)
    assert [(m.from_, m.task_id, m.content) for m in notices] == [
        (
            "system",
            task_id,
            f"{task_id} failed: {failed.error}; the tasks after it ({after}) stay pending",
        )
    ]
    assert len(store.messages.notices(SystemType.TASK_RELEASED)) == 3
    bounded = first_turns + 4 * CALLS_PER_HOLD
    assert calls(llm, stubborn) == bounded
    # More work for the team runs to its end; neither stubborn teammate is called again.
    assert (
        spawn(
            workers, team, "c", llm.script(f"doer-{team}", handler=Doer()), llm.api_base
        ).exit_code
        == 0
    )
    wait_until(lambda: all_idle(store, 3), message="c idle")
    later = add(workers, team, "Write the notes", "--assignee", "c")
    wait_until(
        lambda: (
            task(store, later).status is TaskStatus.COMPLETED
            and all_idle(store, 3)
            and workers_idle(workers)
        ),
        message="c to finish its task",
    )
    assert calls(llm, stubborn) == bounded
    assert task(store, task_id).status is TaskStatus.FAILED
    assert len(store.messages.notices(SystemType.TASK_FAILED)) == 1


def test_team_create_takes_max_task_releases_from_the_teammates_table_within_its_range(
    redis_url: str, conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    good = tmp_path / "team.toml"
    good.write_text("[teammates]\nmax_task_releases = 1\n")
    created = cli("team", "create", "--file", str(good), "-t", team, "--redis-url", redis_url)
    assert created.exit_code == 0, created.output
    store = TeamStore(conn, team)
    assert store.options.max_task_releases == 1
    assert add(redis_url, team, "Fix the build") == "task_1"
    assert conn.hget(store.keys.task("task_1"), "max_releases") == "1"
    for value in (-1, 101):
        bad = tmp_path / "bad.toml"
        bad.write_text(f"[teammates]\nmax_task_releases = {value}\n")
        other = f"t{uuid.uuid4().hex[:10]}"
        refused = cli("team", "create", "--file", str(bad), "-t", other, "--redis-url", redis_url)
        assert refused.exit_code == 2 and "teammates.max_task_releases" in refused.stderr
        assert not TeamStore(conn, other).exists()


PLAN = {
    "tasks": [
        {"id": "task_1", "memberId": "m1", "task": "Collect notes"},
        {"id": "task_2", "memberId": "m1", "task": "Write the summary", "dependsOn": ["task_1"]},
    ]
}


def test_a_planned_task_released_past_max_task_releases_fails_and_blocks_its_dependents(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    def release(body: dict[str, Any]) -> ToolCalls:
        return ToolCalls([("team_release_task", {"taskId": "task_1", "reason": "not mine"})])

    member = f"m1-{run_id}"
    result = run_one_member(
        llm, workers, run_id, tmp_path, PLAN, release, "--max-task-releases", "2"
    )
    out = json.loads(result.stdout)
    states = {s["task_id"]: s for s in out["task_states"]}
    error = "released 2 times (max_task_releases), given up in turn by m1, m1, m1"
    assert (states["task_1"]["status"], states["task_1"]["error"]) == ("failed", error)
    assert states["task_2"]["status"] == "blocked"
    # Each attempt is one model call: the release ends it before the next.
    assert len(llm.requests[member]) == 3
    assert (result.exit_code, out["status"]) == (1, "failed"), result.output
    errors = [
        (m["from"], m["task_id"], m["content"])
        for m in out["messages"]
        if m["type"] == "task.error"
    ]
    assert errors == [("m1", "task_1", error)]


def test_a_release_saying_claim_expired_is_a_release_not_a_crash(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """The reason is the member's words: the next attempt starts a fresh session (no step
    replayed from the journal), and the task quotes the reason as the member's."""
    requests: list[dict[str, Any]] = []

    def release_once(body: dict[str, Any]) -> ToolCalls | str:
        requests.append(body)
        if len(requests) == 1:
            return ToolCalls([("team_release_task", {"reason": "claim expired"})])
        return "done"

    plan = {"tasks": [{"id": "task_1", "memberId": "m1", "task": "Collect notes"}]}
    result = run_one_member(llm, workers, run_id, tmp_path, plan, release_once)
    assert result.exit_code == 0, result.output

    # Two attempts, each with its own model call; the second began a fresh session.
    assert len(requests) == 2
    assert [m["role"] for m in requests[1]["messages"]] == ["system", "user"]
    tasks = CliRunner().invoke(main, ["tasks", run_id, "--redis-url", workers, "--json"])
    [state] = json.loads(tasks.stdout)
    assert (state["status"], state["attempts"], state["replayed_steps"]) == ("completed", 2, 0)
    assert (state["requeue_reason"], state["reclaimed"]) == (
        'released by m1: "claim expired"',
        False,
    )


def test_a_member_s_release_reason_is_kept_as_its_words_on_one_printable_line() -> None:
    assert release_reason("m1", None) == release_reason("m1", "  ") == "released by m1"
    assert release_reason("m1", "claim\x1b]0;owned\x07 expired\n\rnow") == (
        'released by m1: "claim expired now"'
    )
    long = release_reason("m2", "x" * 10_000)
    assert long == f'released by m2: "{"x" * 200}..."'
