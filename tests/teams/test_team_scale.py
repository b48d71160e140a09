"""A team board at scale: 2,000 ready tasks beside idle teammates that fit none of them, then
hand-outs by wake-up and at a turn end, with no script blocking Redis past 5 ms (SLOWLOG);
ready lanes read deeper past tasks a teammate may not take back, index a board written before
lanes existed, and drop an entry a task left behind; a long unread inbox is peeked a page per
script. Real Redis; teammates' turns are driven as a worker drives them (begin_turn / end_turn),
their jobs wait on a queue nobody serves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from teamctl.shared.bus import LEAD
from teamctl.shared.keys import TeamKeys
from teamctl.shared.teams.messages import PEEK_PAGE
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import LANE_HEAD, TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.slowlog import slow_scripts_ms, slowlog_at_the_rule, within_the_rule

NOBODY = "nobody"
TASKS = 2000


def idle(store: TeamStore, name: str, role: str, seen_ms: int) -> None:
    """Spawn a teammate whose first turn waits on a queue nobody serves, then set it idle as a
    turn end leaves it (seen at `seen_ms`: the one idle longest takes a task first)."""
    store.spawn(name, role=role, prompt="Wait.", model="m", api_base=None, queue=NOBODY)
    store.conn.hset(
        store.keys.teammate(name),
        mapping={"status": TeammateStatus.IDLE.value, "job_id": "", "last_seen_ms": seen_ms},
    )


def new_board(conn: redis.Redis, team: str) -> tuple[TeamStore, TeamTasks]:
    """A new team at the default options, and its task board."""
    store = TeamStore(conn, team)
    store.create(TeamOptions())
    return store, TeamTasks(store)


def turn(store: TeamStore, name: str) -> str:
    """Begin the teammate's turn and read its inbox as the turn's first step would; its token."""
    verdict, token = store.turns.begin_turn(name, "test:1")
    assert verdict == "ok"
    last_id, _ = store.messages.peek(name)
    assert store.turns.checkpoint(name, token, last_id, [])
    return token


@pytest.fixture
def slowlog(conn: redis.Redis) -> Iterator[redis.Redis]:
    """SLOWLOG at the 5 ms rule for the test, emptied first; the server's setting restored."""
    with slowlog_at_the_rule(conn):
        yield conn


def test_2000_ready_tasks_beside_idle_teammates_never_block_redis(
    slowlog: redis.Redis, team: str
) -> None:
    conn = slowlog
    store = TeamStore(conn, team)
    store.create(TeamOptions())
    for index in range(8):
        idle(store, f"dev{index}", "dev", index)
    tasks = TeamTasks(store)
    for number in range(1, TASKS + 1):
        task, woken = tasks.add(f"check {number}", role="qa")
        assert (task.task_id, task.status.value, woken) == (f"task_{number}", "ready", [])
    assert conn.zcard(store.keys.ready) == TASKS
    assert conn.zcard(store.keys.ready_role("QA")) == TASKS

    # Two qa teammates go idle: a wake hands each one task, the one idle longest the first.
    idle(store, "qa1", "qa", 100)
    idle(store, "qa0", "qa", 50)
    assert tasks.wake() == ["qa0", "qa1"]
    assert [tasks.get(t).owner for t in ("task_1", "task_2", "task_3")] == ["qa0", "qa1", None]

    # qa0's turn completes its task; its end hands it the lowest ready one, task_3.
    token = turn(store, "qa0")
    tasks.complete("qa0", token, "task_1", "checked")
    assert store.turns.end_turn("qa0", token, "done", "qa0 is idle") == "continue"
    assert tasks.get("task_3").owner == "qa0"
    assert conn.zrange(store.keys.ready_role("qa"), 0, 0) == ["task_4"]

    listed = tasks.snapshot()
    assert len(listed) == TASKS
    assert sum(t.status.value == "ready" for t in listed) == TASKS - 3
    slow = slow_scripts_ms(conn)
    assert within_the_rule(slow, calls=TASKS), slow  # one add per task, at least


def test_a_lane_is_read_deeper_past_tasks_released_from_the_taker(
    conn: redis.Redis, team: str
) -> None:
    store, tasks = new_board(conn, team)
    given_up = 3 * LANE_HEAD
    for number in range(1, given_up + 3):
        tasks.add(f"check {number}", role="qa")
    # alice gave the first tasks up: nothing hands them back to her automatically.
    for number in range(1, given_up + 1):
        conn.hset(store.keys.task(f"task_{number}"), "released_from", "alice")
    idle(store, "alice", "qa", 1)
    assert tasks.wake() == ["alice"]
    assert tasks.get(f"task_{given_up + 1}").owner == "alice"

    # At her turn end the next one she may take lies as deep: her end reads the lane deeper.
    token = turn(store, "alice")
    tasks.complete("alice", token, f"task_{given_up + 1}", "checked")
    assert store.turns.end_turn("alice", token, "done", "alice is idle") == "continue"
    assert tasks.get(f"task_{given_up + 2}").owner == "alice"
    assert tasks.get("task_1").status.value == "ready"


def test_a_board_written_before_lanes_is_indexed_on_its_first_hand_out(
    conn: redis.Redis, team: str
) -> None:
    store, tasks = new_board(conn, team)
    for number in range(1, 4):
        tasks.add(f"check {number}", role="qa" if number < 3 else "")
    keys = TeamKeys(team)
    # As an older teamctl left it: no lane on the hashes, no lanes, not marked indexed.
    for number in range(1, 4):
        conn.hdel(keys.task(f"task_{number}"), "lane")
    conn.delete(keys.ready_role("qa"), keys.ready_open, keys.lanes_indexed)
    idle(store, "bob", "qa", 1)
    assert tasks.wake() == ["bob"]
    assert tasks.get("task_1").owner == "bob"
    assert conn.zrange(keys.ready_role("qa"), 0, -1) == ["task_2"]
    assert conn.zrange(keys.ready_open, 0, -1) == ["task_3"]
    assert conn.hget(keys.task("task_3"), "lane") == keys.ready_open


def test_a_lane_entry_a_task_left_behind_is_dropped_not_handed_out(
    conn: redis.Redis, team: str
) -> None:
    store, tasks = new_board(conn, team)
    tasks.add("first", role="qa")
    tasks.add("second", role="qa")
    idle(store, "carol", "qa", 1)
    assert tasks.wake() == ["carol"]
    token = turn(store, "carol")
    tasks.complete("carol", token, "task_1", "done")
    # task_1 is completed; an entry left in its lane (by a hand edit, say, or an older bug)
    # is dropped by the next script that reads it, and the turn end takes task_2.
    lane = store.keys.ready_role("qa")
    conn.zadd(lane, {"task_1": 0})
    assert store.turns.end_turn("carol", token, "done", "carol is idle") == "continue"
    assert tasks.get("task_2").owner == "carol"
    assert conn.zrange(lane, 0, -1) == []


def test_roles_match_as_the_scripts_compare_them(conn: redis.Redis, team: str) -> None:
    store, tasks = new_board(conn, team)
    tasks.add("ascii case", role="qa")
    tasks.add("other letters", role="élan")
    # A role differing in ASCII case fits; a space or a non-ASCII capital does not (the lanes
    # and the scripts' check agree, as team_task_claim's does).
    idle(store, "spaced", " qa", 1)
    idle(store, "accented", "ÉLAN", 2)
    assert tasks.wake() == []
    idle(store, "upper", "QA", 3)
    assert tasks.wake() == ["upper"]
    assert tasks.get("task_1").owner == "upper"
    assert tasks.get("task_2").status.value == "ready"


def test_a_long_unread_inbox_is_peeked_a_page_per_script_and_counted_without_bodies(
    conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions())
    store.spawn("dora", role="dev", prompt="p", model="m", api_base=None, queue=NOBODY)
    sent = [
        store.messages.send(LEAD, "dora", f"note {n}")[0].id for n in range(1, 2 * PEEK_PAGE + 6)
    ]
    last_id, messages = store.messages.peek("dora")
    assert [m.content for m in messages] == [f"note {n}" for n in range(1, 2 * PEEK_PAGE + 6)]
    assert [m.id for m in messages] == sent
    assert store.messages.unread_count("dora") == len(sent)
    _, first = store.messages.peek("dora", limit=PEEK_PAGE + 1)
    assert [m.content for m in first] == [f"note {n}" for n in range(1, PEEK_PAGE + 2)]
    # Reading moves the offset: the next peek and the count start after it.
    verdict, token = store.turns.begin_turn("dora", "test:1")
    assert verdict == "ok"
    first_page_id = store.messages.peek("dora", limit=PEEK_PAGE)[0]
    assert store.turns.checkpoint("dora", token, first_page_id, [])
    assert store.messages.unread_count("dora") == len(sent) - PEEK_PAGE
    assert store.messages.peek("dora", limit=1)[1][0].content == f"note {PEEK_PAGE + 1}"
    assert last_id == sent[-1]  # an inbox entry has its message's bus id
