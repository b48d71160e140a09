"""Bounded hand-offs: a team task two teammates never finish goes back to the board at most
max_task_releases times, then fails with who gave it up as its error; the lead is told once and
the model calls stop. Real Redis, the session's real workers on `members`, the scripted model."""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError
from teamctl.shared.models import SystemType, TaskStatus
from teamctl.shared.teammates import TeamOptions
from teamctl.shared.teams import TeamStore

from tests.conftest import wait_until
from tests.scripted_llm import ScriptedLLM
from tests.team_support import spawn
from tests.test_team_tasks import Doer, Stubborn, add, all_idle, task, workers_idle

CALLS_PER_HOLD = 2
"""A stubborn holder's model calls per hold: the claim's turn, then the reminder's."""


def calls(llm: ScriptedLLM, name: str) -> int:
    """The model calls the scripted model `name` answered."""
    return len(llm.requests[name])


def test_a_task_two_teammates_never_finish_fails_after_max_task_releases(
        workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str) -> None:
    store = TeamStore(wconn, team)
    stubborn = f"stubborn-{team}"
    model = llm.script(stubborn, handler=Stubborn())
    for name in ("a", "b"):
        assert spawn(workers, team, name, model, llm.api_base).exit_code == 0
        wait_until(lambda: workers_idle(workers), message=f"{name}'s first turn")
    wait_until(lambda: all_idle(store, 2), message="a and b idle")
    first_turns = calls(llm, stubborn)
    assert first_turns == 2
    task_id = add(workers, team, "Fix the build")
    after = add(workers, team, "Ship it", "--after", task_id)
    wait_until(lambda: task(store, task_id).status is TaskStatus.FAILED and all_idle(store, 2)
               and workers_idle(workers), 60, message="the task to fail past its bound")
    failed = task(store, task_id)
    # Three releases (a, b, a), then b gives it up a fourth time: it fails instead.
    assert failed.releases == TeamOptions().max_task_releases == 3
    assert failed.released_by == ["a", "b", "a", "b"]
    assert failed.error == ("released 3 times (max_task_releases), given up in turn by "
                            "a, b, a, b")
    assert failed.owner is None and failed.attempts == 4
    assert task(store, after).status is TaskStatus.PENDING
    notices = store.notices(SystemType.TASK_FAILED)
    assert [(m.from_, m.task_id, m.content) for m in notices] == [
        ("system", task_id, f"{task_id} failed: {failed.error}; the tasks after it ({after}) "
                            "stay pending")]
    assert len(store.notices(SystemType.TASK_RELEASED)) == 3
    bounded = first_turns + 4 * CALLS_PER_HOLD
    assert calls(llm, stubborn) == bounded
    # More work for the team runs to its end; neither stubborn teammate is called again.
    assert spawn(workers, team, "c", llm.script(f"doer-{team}", handler=Doer()),
                 llm.api_base).exit_code == 0
    wait_until(lambda: all_idle(store, 3), message="c idle")
    later = add(workers, team, "Write the notes", "--assignee", "c")
    wait_until(lambda: task(store, later).status is TaskStatus.COMPLETED and all_idle(store, 3)
               and workers_idle(workers), message="c to finish its task")
    assert calls(llm, stubborn) == bounded
    assert task(store, task_id).status is TaskStatus.FAILED
    assert len(store.notices(SystemType.TASK_FAILED)) == 1


@pytest.mark.parametrize("value", [-1, 101])
def test_max_task_releases_has_a_range(value: int) -> None:
    with pytest.raises(ValidationError, match="max_task_releases"):
        TeamOptions(max_task_releases=value)
