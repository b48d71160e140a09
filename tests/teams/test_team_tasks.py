"""The team task board: one claim and one turn for a ready task among idle
teammates, assignees and roles, dependencies released by complete_task, numeric order at a turn
end, one reminder then release, shutdowns releasing tasks, the plan-mode gate, the CLI's exit
codes. Real Redis; the end-to-end tests use the session's real workers on `members` and the
scripted model server through litellm; the rest play turns through the store, as a worker does,
on a queue nobody serves."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis
from rq.job import Job
from teamctl.shared.board import TaskBoard
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.redis.connection import same_server
from teamctl.shared.task_records import EventKind, TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import StaleTurn, TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.worker.teams.teammate_tools import TeammateTools
from teamctl.worker.teams.teammate_workspace import gate_plan

from tests.support.llm import Held, ScriptedLLM
from tests.support.teams import (
    ASSIGNED,
    Doer,
    Stubborn,
    add,
    all_idle,
    base_args,
    cli,
    inbox_lines,
    spawn,
    task,
)
from tests.support.waiting import wait_until
from tests.support.workers import workers_idle

NOBODY = "nobody"


class Slowpoke:
    """A teammate's model that holds its task turn's call until the test sets `release`
    (outside the scripted server's lock, so other teammates' calls go on), then answers without
    completing it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | Held:
        if not ASSIGNED.search(body["messages"][-1].get("content") or ""):
            return "ready"
        self.entered.set()
        return Held("late answer", self.release)


def idle_turns(store: TeamStore, name: str) -> int:
    """How many turns of `name` ended idle (one teammate.idle notice each)."""
    return sum(
        m.content.startswith(f"{name} is idle")
        for m in store.messages.notices(SystemType.TEAMMATE_IDLE)
    )


def task_events(store: TeamStore, task_id: str) -> list[EventKind]:
    return [
        EventKind(e.status) for e in store.messages.events(count=10_000) if e.task_id == task_id
    ]


def tool_results(store: TeamStore, name: str, tool: str) -> list[str]:
    """The contents of the tool results `name`'s memory holds for calls of `tool`."""
    memory = store.turns.memory(name)
    calls = {
        call["id"]: call["function"]["name"] for m in memory for call in m.get("tool_calls") or []
    }
    return [
        m["content"]
        for m in memory
        if m.get("role") == "tool" and calls.get(m.get("tool_call_id")) == tool
    ]


# --- end to end, on the shared workers ---------------------------------------------------------


def test_five_idle_teammates_and_one_ready_task_make_one_claim_and_one_turn(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    model = llm.script(f"crew-{team}", handler=Doer())
    store = TeamStore(wconn, team)
    names = [f"m{i}" for i in range(5)]
    for name in names:
        assert spawn(workers, team, name, model, llm.api_base).exit_code == 0
    wait_until(lambda: all_idle(store, 5), 60, message="five idle teammates")
    wait_until(lambda: workers_idle(workers), message="the first turns' jobs to finish")
    assert len(llm.requests[f"crew-{team}"]) == 5
    task_id = add(workers, team, "Write the report", "--description", "Two pages.")
    assert task_id == "task_1"
    wait_until(
        lambda: (
            task(store, task_id).status is TaskStatus.COMPLETED
            and all_idle(store, 5)
            and workers_idle(workers)
        ),
        message="the task done and everyone idle again",
    )
    done = task(store, task_id)
    # One claim: one attempt, one in_progress event; one turn: two model calls (the claim's
    # message, then the tool result), one more idle notice, all from the claimer.
    assert done.attempts == 1 and done.output == "did task_1"
    assert task_events(store, task_id) == [
        EventKind.CREATED,
        EventKind.IN_PROGRESS,
        EventKind.COMPLETED,
    ]
    assert len(llm.requests[f"crew-{team}"]) == 7
    turns = {name: idle_turns(store, name) for name in names}
    assert sorted(turns.values()) == [1, 1, 1, 1, 2] and turns[done.claimed_by] == 2
    [assigned] = [
        line
        for line in inbox_lines(store.turns.memory(done.claimed_by))
        if line["type"] == SystemType.TASK_ASSIGNED
    ]
    assert "task_1" in assigned["content"] and "Write the report\nTwo pages." in assigned["content"]
    results = [m for m in store.messages.peek("lead")[1] if m.type == SystemType.TASK_RESULT]
    assert [(m.from_, m.task_id, m.content) for m in results] == [
        (done.claimed_by, "task_1", "did task_1")
    ]
    # The board's own reader lists team tasks.
    [state] = TaskBoard(wconn, store.keys).snapshot()
    assert (state.task_id, state.status, state.task) == (
        "task_1",
        TaskStatus.COMPLETED,
        "Write the report",
    )


def test_an_assignee_reserves_a_task_and_a_role_picks_its_teammate(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    models = {name: llm.script(f"{name}-{team}", handler=Doer()) for name in ("a", "b", "c")}
    for name, model in models.items():
        assert spawn(workers, team, name, model, llm.api_base).exit_code == 0
    wait_until(lambda: all_idle(store, 3), message="three idle teammates")
    reserved = add(workers, team, "For c only", "--assignee", "c")
    by_role = add(workers, team, "For the b role", "--role", "b-role")
    unmatched = add(workers, team, "For a role nobody has", "--role", "pilot")
    wait_until(
        lambda: (
            all(task(store, t).status is TaskStatus.COMPLETED for t in (reserved, by_role))
            and all_idle(store, 3)
            and workers_idle(workers)
        ),
        message="the two matching tasks done",
    )
    assert task(store, reserved).claimed_by == "c" and task(store, by_role).claimed_by == "b"
    assert task(store, unmatched).status is TaskStatus.READY
    assert len(llm.requests[f"a-{team}"]) == 1  # a fitted neither task: never woken
    listed = json.loads(cli("team", "task", "list", "--json", *base_args(workers, team)).output)
    assert [(t["id"], t["status"], t["owner"], t["assignee"], t["role"]) for t in listed] == [
        ("task_1", "completed", None, "c", None),
        ("task_2", "completed", None, None, "b-role"),
        ("task_3", "ready", None, None, "pilot"),
    ]


def test_completing_a_dependency_readies_its_dependent_for_an_idle_teammate(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    hold = threading.Event()
    first = Doer(hold)
    store = TeamStore(wconn, team)
    assert (
        spawn(workers, team, "a", llm.script(f"a-{team}", handler=first), llm.api_base).exit_code
        == 0
    )
    assert (
        spawn(workers, team, "b", llm.script(f"b-{team}", handler=Doer()), llm.api_base).exit_code
        == 0
    )
    wait_until(lambda: all_idle(store, 2), message="two idle teammates")
    research = add(workers, team, "Research", "--assignee", "a")
    assert first.entered.wait(60)
    write = add(workers, team, "Write it up", "--after", research)
    assert task(store, write).status is TaskStatus.PENDING
    assert task(store, write).depends_on == [research]
    assert store.get("b").status is TeammateStatus.IDLE  # nothing ready for b yet
    hold.set()
    wait_until(
        lambda: (
            task(store, write).status is TaskStatus.COMPLETED
            and all_idle(store, 2)
            and workers_idle(workers)
        ),
        message="the dependent task done",
    )
    assert task(store, write).claimed_by == "b" and task(store, write).attempts == 1
    [completed] = tool_results(store, "a", "complete_task")
    assert json.loads(completed) == {
        "action": "complete_task",
        "ok": True,
        "task_id": research,
        "now_ready": [write],
        "woke": ["b"],
    }


def test_a_task_held_through_a_reminder_goes_back_to_the_board_and_to_the_next_turn_end(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    stubborn = llm.script(f"r-{team}", handler=Stubborn())
    assert spawn(workers, team, "r", stubborn, llm.api_base).exit_code == 0
    wait_until(lambda: all_idle(store, 1), message="r idle")
    task_id = add(workers, team, "Fix the build")
    wait_until(
        lambda: (
            task(store, task_id).status is TaskStatus.READY
            and task(store, task_id).attempts == 1
            and all_idle(store, 1)
        ),
        message="the task released from r",
    )
    released = task(store, task_id)
    assert released.requeue_reason == "r ended two turns without completing it"
    assert released.released_from == "r" and released.claimed_by is None
    # One turn for the claim, one reminder turn, then the release: r is not given it again.
    assert len(llm.requests[f"r-{team}"]) == 3
    reminders = [
        line
        for line in inbox_lines(store.turns.memory("r"))
        if line["type"] == SystemType.TASK_REMINDER
    ]
    assert len(reminders) == 1 and "You still hold task_1" in reminders[0]["content"]
    # A teammate spawned now takes it at the end of its first turn.
    assert (
        spawn(workers, team, "s", llm.script(f"s-{team}", handler=Doer()), llm.api_base).exit_code
        == 0
    )
    wait_until(
        lambda: (
            task(store, task_id).status is TaskStatus.COMPLETED
            and all_idle(store, 2)
            and workers_idle(workers)
        ),
        message="s to finish the task",
    )
    done = task(store, task_id)
    assert (done.claimed_by, done.attempts, done.output) == ("s", 2, "did task_1")
    assert task_events(store, task_id) == [
        EventKind.CREATED,
        EventKind.IN_PROGRESS,
        EventKind.RELEASED,
        EventKind.IN_PROGRESS,
        EventKind.COMPLETED,
    ]
    assert idle_turns(store, "s") == 1  # the claim continued its first turn


def test_a_forced_shutdown_gives_the_task_to_an_idle_teammate_and_the_late_turn_writes_nothing(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    held = Slowpoke()
    assert (
        spawn(workers, team, "h", llm.script(f"h-{team}", handler=held), llm.api_base).exit_code
        == 0
    )
    wait_until(lambda: all_idle(store, 1), message="h idle")
    # k goes idle after h, so h, idle longest, gets the task.
    assert (
        spawn(workers, team, "k", llm.script(f"k-{team}", handler=Doer()), llm.api_base).exit_code
        == 0
    )
    wait_until(lambda: all_idle(store, 2), message="k idle")
    task_id = add(workers, team, "Deploy")
    assert held.entered.wait(60)
    assert task(store, task_id).claimed_by == "h"
    forced = cli("team", "shutdown", "h", "--force", *base_args(workers, team))
    assert forced.exit_code == 0, forced.output
    wait_until(
        lambda: task(store, task_id).status is TaskStatus.COMPLETED,
        message="k to take and finish the released task",
    )
    # h's model call was still out: its answer comes back to a revoked turn.
    assert len(llm.requests[f"h-{team}"]) == 2
    held.release.set()
    wait_until(lambda: workers_idle(workers), message="h's revoked turn to stop")
    done = task(store, task_id)
    assert (done.claimed_by, done.output, done.attempts) == ("k", "did task_1", 2)
    assert done.requeue_reason == "h was shut down (forced)"
    assert store.get("h").status is TeammateStatus.SHUTDOWN
    assert "late answer" not in json.dumps(store.turns.memory("h"))


# --- the store, driven by hand ----------------------------------------------------------------


@pytest.fixture
def store(conn: redis.Redis, team: str) -> TeamStore:
    made = TeamStore(conn, team)
    made.create(TeamOptions(max_message_bytes=2048))
    return made


def start(store: TeamStore, name: str, role: str = "dev", *, plan_mode: bool = False) -> str:
    """Spawn `name` on a queue nobody serves and take its turn; returns the turn's token."""
    store.spawn(
        name, role=role, prompt="start", model="m", api_base=None, queue=NOBODY, plan_mode=plan_mode
    )
    verdict, token = store.turns.begin_turn(name, "test:1")
    assert verdict == "ok"
    return token


def read_inbox(store: TeamStore, name: str, token: str) -> list[Any]:
    """What the turn injects next, committed as a step would."""
    last_id, messages = store.messages.peek(name)
    assert store.turns.checkpoint(name, token, last_id, [])
    return messages


def test_a_turn_end_claims_the_lowest_numbered_eligible_task(store: TeamStore) -> None:
    token = start(store, "alice")
    tasks = TeamTasks(store)
    for number in range(1, 11):
        tasks.add(f"job {number}", role="dev" if number in (2, 10) else "ops")
    assert [t.status for t in tasks.snapshot()] == [TaskStatus.READY] * 10  # alice is working
    assert store.turns.end_turn("alice", token, "done", "n") == "continue"
    [assigned] = read_inbox(store, "alice", token)
    assert (assigned.type, assigned.task_id) == (SystemType.TASK_ASSIGNED, "task_2")
    assert tasks.get("task_2").claimed_by == "alice"
    tasks.complete("alice", token, "task_2", "two done")
    assert store.turns.end_turn("alice", token, "done", "n") == "continue"
    [assigned] = read_inbox(store, "alice", token)
    assert assigned.task_id == "task_10" and tasks.get("task_10").owner == "alice"


def test_one_reminder_then_the_release_wakes_an_idle_teammate(store: TeamStore) -> None:
    tasks = TeamTasks(store)
    token = start(store, "alice")
    bob = start(store, "bob")
    tasks.add("anyone")
    tasks.claim("alice", token, "task_1")
    assert store.turns.end_turn("bob", bob, "done", "bob idle") == "idle"  # nothing ready for bob
    assert store.turns.end_turn("alice", token, "done", "n") == "continue"
    [reminder] = read_inbox(store, "alice", token)
    assert reminder.type == SystemType.TASK_REMINDER
    assert reminder.content.startswith("You still hold task_1.")
    assert store.turns.end_turn("alice", token, "done", "alice idle") == "idle"
    # Released with the reason, then handed to idle bob (never back to alice), bob woken.
    handed = tasks.get("task_1")
    assert (handed.status, handed.owner, handed.requeue_reason, handed.released_from) == (
        TaskStatus.IN_PROGRESS,
        "bob",
        "alice ended two turns without completing it",
        "alice",
    )
    assert store.get("bob").status is TeammateStatus.WORKING
    assert store.get("alice").status is TeammateStatus.IDLE
    assert [m.type for m in store.messages.peek("bob")[1]] == [SystemType.TASK_ASSIGNED]


def test_an_approved_shutdown_and_a_failed_turn_release_their_tasks(store: TeamStore) -> None:
    tasks = TeamTasks(store)
    token = start(store, "alice")
    tasks.add("first")
    tasks.claim("alice", token, "task_1")
    record, _ = store.requests.request_shutdown("alice")
    store.requests.respond_shutdown("alice", record.id, True)
    assert store.turns.end_turn("alice", token, "done", "n") == "shutdown"
    first = tasks.get("task_1")
    assert (first.status, first.requeue_reason, first.owner) == (
        TaskStatus.READY,
        "alice shut down",
        None,
    )
    carol = start(store, "carol")
    tasks.claim("carol", carol, "task_1")
    assert (
        store.turns.end_turn("carol", carol, "error: boom", "n", force=True, error="boom") == "idle"
    )
    # Back on the board at once, and not handed back to carol (its next turn may fail too).
    again = tasks.get("task_1")
    assert (again.status, again.requeue_reason, again.released_from) == (
        TaskStatus.READY,
        "carol's turn failed: boom",
        "carol",
    )
    assert store.get("carol").status is TeammateStatus.IDLE


def test_a_teammate_whose_turn_keeps_getting_lost_loses_its_tasks(
    conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(heartbeat_ttl_s=0.2, max_turn_attempts=1))
    tasks = TeamTasks(store)
    token = start(store, "alice")
    tasks.add("fragile")
    tasks.claim("alice", token, "task_1")
    conn.delete(store.keys.turn("alice"))  # its worker died: the lease is gone

    def given_up() -> bool:
        job_id = store.get("alice").job_id
        rq_conn = same_server(conn, decode=False)
        if job_id and Job.exists(job_id, connection=rq_conn):  # each rerun's job is lost too
            Job.fetch(job_id, connection=rq_conn).delete()
        store.scheduler.reconcile()
        return store.get("alice").status is TeammateStatus.IDLE

    wait_until(given_up, 10, 0.05, "reconcile to give up on alice")
    lost = tasks.get("task_1")
    assert (lost.status, lost.requeue_reason, lost.released_from) == (
        TaskStatus.READY,
        "alice's turn was lost 1 times",
        "alice",
    )


def test_plan_mode_gates_claim_and_complete_until_the_plan_is_approved(store: TeamStore) -> None:
    tasks = TeamTasks(store)
    token = start(store, "pat", plan_mode=True)
    tasks.add("build it")
    box = TeammateTools(store, "pat").toolbox()
    gate_plan(box, lambda: store.plan_state("pat"))  # as the turn does in plan mode
    for tool, args in (
        ("claim_task", {"task_id": "task_1"}),
        ("complete_task", {"task_id": "task_1", "result": "x"}),
    ):
        refused = box.call(tool, json.dumps(args))
        assert refused.startswith("TOOL_ERROR: ") and "submit_plan" in refused
    assert tasks.get("task_1").status is TaskStatus.READY
    # Nor does a turn end hand it a task while the gate is closed.
    assert store.turns.end_turn("pat", token, "done", "pat idle") == "idle"
    assert tasks.get("task_1").status is TaskStatus.READY
    assert store.messages.send("lead", "pat", "go on")[1]  # woken
    assert store.turns.begin_turn("pat", "test:2")[0] == "ok"
    request = store.requests.submit_plan("pat", "build it carefully")
    store.requests.review_plan(request.id, True)
    box = TeammateTools(store, "pat").toolbox()
    claimed = json.loads(box.call("claim_task", json.dumps({"task_id": "Task 1"})))
    assert claimed == {
        "action": "claim_task",
        "ok": True,
        "task_id": "task_1",
        "subject": "build it",
        "description": "",
    }
    done = json.loads(box.call("complete_task", json.dumps({"task_id": "1", "result": "built"})))
    assert done["ok"] and tasks.get("task_1").output == "built"


def test_a_team_task_waiting_on_two_is_ready_only_once_both_are_completed(store: TeamStore) -> None:
    tasks = TeamTasks(store)
    alice, bob = start(store, "alice"), start(store, "bob")
    tasks.add("first")
    tasks.add("second")
    tasks.add("both", after=["task_1", "task_2"])
    tasks.claim("alice", alice, "task_1")
    tasks.claim("bob", bob, "task_2")
    assert tasks.complete("alice", alice, "task_1", "one") == ([], [])
    # One of its two dependencies done: still pending, refused by claim_task, not handed out.
    assert tasks.get("task_3").status is TaskStatus.PENDING
    box = TeammateTools(store, "alice").toolbox()
    refused = box.call("claim_task", json.dumps({"task_id": "task_3"}))
    assert refused.startswith("TOOL_ERROR: ")
    assert "task_3 is pending: it waits for task_2" in refused
    assert tasks.get("task_3").status is TaskStatus.PENDING
    again = box.call("complete_task", json.dumps({"task_id": "task_1", "result": "again"}))
    assert again.startswith("TOOL_ERROR: ") and "task_1 is already completed" in again
    assert tasks.get("task_1").output == "one"
    ready, woken = tasks.complete("bob", bob, "task_2", "two")
    assert (ready, woken) == (["task_3"], [])  # both teammates are working: nobody to wake
    assert tasks.get("task_3").status is TaskStatus.READY
    claimed = json.loads(box.call("claim_task", json.dumps({"task_id": "task_3"})))
    assert claimed["ok"] is True and tasks.get("task_3").owner == "alice"


def test_task_tools_refuse_what_the_board_does_not_allow(store: TeamStore) -> None:
    tasks = TeamTasks(store)
    start(store, "alice")
    bob = start(store, "bob", role="ops")
    tasks.add("first")
    tasks.add("second", after=["task_1"])
    tasks.add("ops only", role="ops")
    tasks.add("bob only", assignee="bob")
    box = TeammateTools(store, "alice").toolbox()

    def error(tool: str, **args: str) -> str:
        reply = box.call(tool, json.dumps(args))
        assert reply.startswith("TOOL_ERROR: "), reply
        return json.loads(reply.removeprefix("TOOL_ERROR: "))["error"]

    assert "unknown task task_9" in error("claim_task", task_id="task_9")
    assert "invalid task id" in error("claim_task", task_id="first")
    assert "task_2 is pending: it waits for task_1" in error("claim_task", task_id="task_2")
    assert "task_3 is for role 'ops'" in error("claim_task", task_id="task_3")
    assert "task_4 is reserved for bob" in error("claim_task", task_id="task_4")
    tasks.claim("bob", bob, "task_1")
    assert "task_1 is already held by bob" in error("claim_task", task_id="task_1")
    assert "task_1 is held by bob, not you" in error("complete_task", task_id="task_1", result="x")
    assert "claim_task it first" in error("complete_task", task_id="task_3", result="x")
    with pytest.raises(StaleTurn):
        tasks.complete("bob", "999", "task_1", "stale token")  # a revoked turn
    assert tasks.get("task_1").status is TaskStatus.IN_PROGRESS
    listed = json.loads(box.call("list_tasks", "{}"))
    assert listed["action"] == "list_tasks" and listed["ok"] is True
    assert [(t["id"], t["status"], t["owner"]) for t in listed["tasks"]] == [
        ("task_1", "in_progress", "bob"),
        ("task_2", "pending", None),
        ("task_3", "ready", None),
        ("task_4", "ready", None),
    ]


def test_task_add_and_list_exit_codes(redis_url: str, store: TeamStore) -> None:
    base = base_args(redis_url, store.team)
    start(store, "alice")
    added = cli("team", "task", "add", "Plan the week", "--role", "dev", *base)
    assert added.exit_code == 0 and added.stdout == "task_1\n"
    assert cli("team", "task", "add", "Then this", "--after", "task_1", *base).stdout == "task_2\n"
    for bad in (
        ("--assignee", "carol"),
        ("--assignee", "Bad/Name"),
        ("--after", "task_9"),
        ("--after", "nonsense"),
        ("--description", "x" * 4096),
    ):
        refused = cli("team", "task", "add", "Nope", *bad, *base)
        assert refused.exit_code == 2, (bad, refused.output)
        assert refused.output.count("\n") == 1 and refused.output.startswith("teamctl:")
    assert cli("team", "task", "add", "  ", *base).exit_code == 2
    assert cli("team", "task", "list", "-t", "nosuch", "--redis-url", redis_url).exit_code == 2
    assert [t.task_id for t in TeamTasks(store).snapshot()] == ["task_1", "task_2"]
    shown = cli("team", "task", "list", *base)
    assert shown.exit_code == 0
    assert shown.output.splitlines() == [
        "task_1\tready\t-\tdev\t-\tPlan the week",
        "task_2\tpending\t-\t-\ttask_1\tThen this",
    ]
    with pytest.raises(ConfigError):
        TeamTasks(store).add("x", assignee="lead")
