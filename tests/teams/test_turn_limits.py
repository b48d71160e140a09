"""Turn boundaries the review found unguarded: a turn end, a forced shutdown or a reconcile
given a task snapshot that changed meanwhile reads it again instead of missing a task; a job
that ran turns for long hands the teammate to a fresh job; a turn stops at turn_timeout_s.
Real Redis; the last two on the session's real workers and the scripted model."""

from __future__ import annotations

import uuid

import redis
from teamctl.shared.bus import LEAD
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import HeldFirstCall, inbox_lines
from tests.support.waiting import wait_until


def working_alice(conn: redis.Redis, team: str) -> tuple[TeamStore, str]:
    """Alice in a turn this test plays (her job queues where nobody listens)."""
    store = TeamStore(conn, team)
    store.create()
    store.spawn("alice", role="dev", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    return store, token


def test_a_turn_end_given_a_stale_ready_list_retries_and_claims_the_new_task(
    conn: redis.Redis, team: str
) -> None:
    store, token = working_alice(conn, team)
    tasks = TeamTasks(store)
    tasks.add("arrived as the turn ended")  # alice works: nobody claims it now
    keys = store.keys
    lanes = tasks.lanes_of("alice", store.get("alice").role)
    stale = store.scripts["turn_end"](
        keys=[
            keys.turn("alice"),
            keys.teammate("alice"),
            keys.inbox("alice"),
            keys.read_offsets,
            keys.bus,
            keys.bus_seq,
            keys.inbox(LEAD),
            *tasks.board_keys(),
            *lanes,
        ],
        args=[token, "alice", "done", "alice is idle", "0", "", 0, len(lanes), *[8] * len(lanes)],
    )  # the lanes' heads read before the add: no candidate
    assert stale == ["retry", 0]
    assert store.get("alice").status is TeammateStatus.WORKING  # nothing changed
    # Read fresh, the same end claims the task for her and the turn goes on.
    assert store.turns.end_turn("alice", token, "done", "alice is idle") == "continue"
    assert tasks.get("task_1").owner == "alice"


def test_a_forced_shutdown_given_a_stale_running_list_retries_and_releases_the_task(
    conn: redis.Redis, team: str
) -> None:
    store, token = working_alice(conn, team)
    tasks = TeamTasks(store)
    tasks.add("claimed at the last moment")
    tasks.claim("alice", token, "task_1")
    keys = store.keys
    stale = store.scripts["team_shutdown"](
        keys=[
            keys.teammate("alice"),
            keys.turn("alice"),
            keys.bus,
            keys.bus_seq,
            keys.inbox(LEAD),
            *tasks.board_keys(),
        ],  # the claim is missing
        args=["alice shut down", "alice"],
    )
    assert stale == ["retry", 0]
    assert store.get("alice").status is TeammateStatus.WORKING
    store.requests.force_shutdown("alice")
    assert store.get("alice").status is TeammateStatus.SHUTDOWN
    assert tasks.get("task_1").status is TaskStatus.READY


def test_a_long_running_job_hands_the_next_turn_to_a_fresh_job(
    workers: str, llm: ScriptedLLM
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    store = TeamStore(conn, f"t{uuid.uuid4().hex[:10]}")
    # Turns of 0.8 s or more: past half of turn_timeout_s, the job hands over.
    store.create(TeamOptions(turn_timeout_s=1.0))
    model = HeldFirstCall("first answer", "second answer")
    bob = llm.script(f"bob-{store.team}", handler=model, latency_s=0.8)
    store.spawn("bob", role="r", prompt="Start.", model=bob, api_base=llm.api_base, queue="members")
    assert model.entered.wait(30)
    # Unread as the first turn ends: another turn is due.
    store.messages.send(LEAD, "bob", "more work")
    model.release.set()
    wait_until(
        lambda: store.get("bob").status is TeammateStatus.IDLE and model.calls == 2,
        30,
        message="bob's second turn, on a fresh job",
    )
    details = [(e.status, e.detail) for e in store.messages.events() if e.mate == "bob"]
    assert ("working", "handed over") in details
    assert [m["content"] for m in inbox_lines(store.turns.memory("bob"))] == ["more work"]
    assert store.turns.memory("bob")[-1]["content"] == "second answer"


def test_a_turn_stops_before_a_model_call_past_turn_timeout_s(
    workers: str, llm: ScriptedLLM
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    store = TeamStore(conn, f"t{uuid.uuid4().hex[:10]}")
    store.create(TeamOptions(turn_timeout_s=1.0))
    busy = llm.script(
        f"busy-{store.team}", [ToolCalls([("list_teammates", {})])], repeat_last=True, latency_s=0.6
    )
    store.spawn(
        "busy",
        role="r",
        prompt="Keep checking.",
        model=busy,
        api_base=llm.api_base,
        queue="members",
    )
    wait_until(lambda: store.get("busy").status is TeammateStatus.IDLE, 30, message="busy to stop")
    assert store.get("busy").idle_reason == "time_limit"
    # Each call takes 0.6 s or more: past 1 s after one or two of them, no further call.
    assert 1 <= len(llm.requests[busy.removeprefix("openai/")]) <= 2
