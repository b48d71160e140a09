"""The message bus against a real redis-server: AI4J's visibility cases, refusals, history,
trimming that never loses an unread message, and the bus switched off."""

from __future__ import annotations

import json

import pytest
import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus, delivered_to
from teamctl.shared.envelopes import ENVELOPES, Envelope, PeerMessage, SystemNotice, SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RunKeys
from teamctl.shared.roster import write_roster
from teamctl.shared.task_records import TaskSpec

from tests.support.runs import roster_bus

MEMBERS = ["m1", "m2", "m3"]


def contents(messages: list[Envelope]) -> list[str]:
    return [m.content for m in messages]


@pytest.fixture
def bus(conn: redis.Redis, run_id: str) -> MessageBus:
    return roster_bus(conn, run_id, MEMBERS)


def test_direct_and_broadcast_visibility_per_member(bus: MessageBus) -> None:
    bus.publish("system", "m1", "task.assigned", "t1", "do t1")
    bus.send("m1", "m2", None, "t1", "m1 to m2")
    bus.broadcast("m2", None, None, "m2 to all")
    bus.publish("system", None, "note", None, "to nobody")
    bus.publish("m1", "lead", "task.result", "t1", "result")

    assert contents(bus.read_unread("m1")) == ["do t1", "m2 to all", "to nobody"]
    assert contents(bus.read_unread("m2")) == ["m1 to m2", "to nobody"]
    assert contents(bus.read_unread("m3")) == ["m2 to all", "to nobody"]
    assert bus.read_unread("lead") == []
    everything = bus.messages()
    assert [(m.from_, m.to, m.type) for m in everything] == [
        ("system", "m1", "task.assigned"),
        ("m1", "m2", "peer.message"),
        ("m2", "*", "peer.broadcast"),
        ("system", None, "note"),
        ("m1", "lead", "task.result"),
    ]
    # The fan-out and the public predicate agree on who got what.
    for member in MEMBERS:
        assert [m.id for m in bus.history_for(member, 0)] == [
            m.id for m in everything if delivered_to(m, member)
        ]


def redis_ms(conn: redis.Redis) -> int:
    """The Redis server's clock, in milliseconds (the clock created_at is read from)."""
    seconds, micros = conn.time()
    return seconds * 1000 + micros // 1000


def test_a_reread_returns_nothing_and_later_messages_come_next(
    bus: MessageBus, conn: redis.Redis
) -> None:
    bus.send("m1", "m2", None, None, "first")
    assert contents(bus.read_unread("m2")) == ["first"]
    assert bus.read_unread("m2") == []

    before_ms = redis_ms(conn)
    bus.send("m3", "m2", "question", "t9", "second")
    after_ms = redis_ms(conn)
    bus.broadcast("m1", "news", None, "third")
    later = bus.read_unread("m2")
    assert contents(later) == ["second", "third"]
    assert (later[0].from_, later[0].to, later[0].type, later[0].task_id) == (
        "m3",
        "m2",
        "question",
        "t9",
    )
    assert before_ms <= later[0].created_at <= after_ms
    assert bus.read_unread("m2") == []


def test_reads_are_in_stream_order_across_batches(bus: MessageBus) -> None:
    sent = [bus.send("m1", "m2", None, None, f"n{i}") for i in range(2500)]
    received = bus.read_unread("m2")
    assert [m.id for m in received] == [s.id for s in sent]
    assert bus.read_unread("m2") == []


def test_history_is_the_last_messages_delivered_read_or_not(bus: MessageBus) -> None:
    for i in range(5):
        bus.send("m1", "m2", None, None, f"d{i}")
    bus.send("m2", "m3", None, None, "own direct")
    bus.broadcast("m2", None, None, "own broadcast")
    bus.read_unread("m2")
    bus.broadcast("m3", None, None, "b")

    assert contents(bus.history_for("m2", 3)) == ["d3", "d4", "b"]
    assert contents(bus.history_for("m2", 0)) == ["d0", "d1", "d2", "d3", "d4", "b"]
    assert contents(bus.history_for("m2", -1)) == contents(bus.history_for("m2", 100))
    assert bus.history_for("lead", 5) == []


@pytest.mark.parametrize(
    ("to", "says"),
    [
        ("nobody", "unknown team member 'nobody'"),
        ("lead", "'lead' cannot receive peer messages"),
        ("system", "'system' cannot receive peer messages"),
        ("../m2", "invalid recipient '../m2'"),
        ("m2/../m3", "invalid recipient"),
        ("", "invalid recipient ''"),
        ("m1", "'m1' cannot send a message to itself"),
    ],
)
def test_bad_recipients_are_refused_saying_who_may_be_messaged(
    bus: MessageBus, to: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        bus.send("m1", to, None, None, "hi")
    assert says in str(refused.value)
    assert "send to one of: m1, m2, m3, or '*'" in str(refused.value)
    assert bus.messages() == []


@pytest.mark.parametrize(
    "type_",
    [
        "",
        "  ",
        "peer message",
        "x" * 65,
        "1abc",
        "a/b",
        "task.assigned",
        "run.complete",
        "Task.Result",
    ],
)
def test_bad_types_are_refused(bus: MessageBus, type_: str) -> None:
    with pytest.raises(ConfigError, match="type"):
        bus.send("m1", "m2", type_, None, "hi")
    with pytest.raises(ConfigError, match="type"):
        bus.broadcast("m1", type_, None, "hi")
    assert bus.messages() == []


@pytest.mark.parametrize("type_", [*SystemType, "Plan.Approved", "hook.anything", "run.note"])
def test_only_the_runtime_publishes_system_types(bus: MessageBus, type_: str) -> None:
    """A member sending `plan.approved` or `hook.error` would pose as the runtime to the lead,
    the hooks and `teamctl messages`."""
    for sender in ("m1", "lead"):
        with pytest.raises(ConfigError, match="reserved for the runtime") as direct:
            bus.send(sender, "m2", type_, None, "hi")
        with pytest.raises(ConfigError, match="reserved for the runtime") as broadcast:
            bus.broadcast(sender, type_, None, "hi")
        for refusal in (str(direct.value), str(broadcast.value)):
            assert "'peer.message', 'peer.broadcast'" in refusal  # what a member may send
            assert "plan.approved" in refusal and "hook.error" in refusal
    assert bus.messages() == []
    published = bus.publish("system", "lead", type_, None, "from the runtime")
    assert published is not None and bus.messages() == [published]


def test_messages_parse_as_system_notices_or_peer_messages(bus: MessageBus) -> None:
    bus.publish("system", "lead", SystemType.PLAN_APPROVED, None, "ok")
    bus.publish("system", "lead", SystemType.HOOK_ERROR, None, "a hook raised")
    bus.send("m1", "m2", "peer.ask", "t1", "question")
    bus.broadcast("m2", None, None, "news")
    bus.publish("system", "lead", "run.note", None, "a type this version does not know")

    messages = bus.messages()
    assert [type(m) for m in messages] == [
        SystemNotice,
        SystemNotice,
        PeerMessage,
        PeerMessage,
        PeerMessage,
    ]
    assert [m.type for m in messages[:2]] == [SystemType.PLAN_APPROVED, SystemType.HOOK_ERROR]
    assert messages[1].type is SystemType.HOOK_ERROR
    # What the stream holds and what readers print stay plain text fields, named as the CLI
    # names them (`from`) without asking.
    assert [m.model_dump_json() for m in messages[:3]] == [
        f'{{"id":"{m.id}","from":"{m.from_}","to":"{m.to}","type":"{m.type}",'
        f'"task_id":{json.dumps(m.task_id)},"content":"{m.content}","created_at":{m.created_at}}}'
        for m in messages[:3]
    ]
    assert ENVELOPES.validate_python(messages[0].model_dump()) == messages[0]
    assert [set(m.model_dump()) & {"from", "from_"} for m in messages] == [{"from"}] * 5


def test_unknown_senders_are_refused(bus: MessageBus) -> None:
    with pytest.raises(ConfigError, match="unknown sender 'ghost'"):
        bus.send("ghost", "m2", None, None, "hi")
    with pytest.raises(ConfigError, match="unknown sender"):
        bus.broadcast("../m1", None, None, "hi")
    assert bus.send("lead", "m2", None, None, "from the lead") is not None
    assert contents(bus.read_unread("m2")) == ["from the lead"]


def test_content_over_the_limit_is_refused_with_the_limit(conn: redis.Redis, run_id: str) -> None:
    # The limit is on the whole message: "m1" + "m2" + "peer.message" leave 24 bytes of content.
    bus = roster_bus(conn, run_id, MEMBERS, max_message_bytes=40)
    assert bus.send("m1", "m2", None, None, "x" * 24) is not None
    with pytest.raises(ConfigError, match=r"41 bytes \(content 25, .*the limit is 40 bytes"):
        bus.send("m1", "m2", None, None, "x" * 25)
    with pytest.raises(ConfigError, match=r"41 bytes \(content 24"):
        bus.broadcast("m1", None, None, "é" * 12)
    assert len(bus.messages()) == 1


def test_recipient_ids_are_normalized_in_case_and_spaces(bus: MessageBus) -> None:
    sent = bus.send("m1", " M2 ", None, None, "hi")
    assert sent is not None and sent.to == "m2"
    assert bus.send("m1", " * ", None, None, "all").type == "peer.broadcast"
    assert contents(bus.read_unread("m2")) == ["hi", "all"]


def test_ids_are_checked_before_they_reach_a_key(conn: redis.Redis, run_id: str) -> None:
    with pytest.raises(ConfigError, match="invalid member id"):
        roster_bus(conn, run_id, ["m1", "../x"])
    with pytest.raises(ConfigError, match="reserved"):
        roster_bus(conn, run_id, ["m1", "lead"])
    with pytest.raises(ConfigError, match="invalid run id"):
        roster_bus(conn, "../run", MEMBERS)
    assert conn.keys("*") == []  # a refused roster writes nothing
    bus = roster_bus(conn, run_id, MEMBERS)
    for bad in ("../x", "ghost"):
        with pytest.raises(ConfigError, match="not a member of this run; members: m1, m2, m3"):
            bus.read_unread(bad)
    keys = RunKeys(run_id)
    assert sorted(conn.keys("*")) == sorted([keys.roster, keys.roster_ver])


def test_a_disabled_bus_publishes_nothing_and_reads_nothing(conn: redis.Redis, run_id: str) -> None:
    on = roster_bus(conn, run_id, MEMBERS)
    off = roster_bus(conn, run_id, MEMBERS, enabled=False)
    assert off.publish("system", "m1", "task.assigned", "t1", "x") is None
    assert off.send("m1", "m2", None, None, "x") is None
    assert off.broadcast("m1", None, None, "x") is None
    keys = RunKeys(run_id)
    assert sorted(conn.keys("*")) == sorted([keys.roster, keys.roster_ver])  # the roster only
    on.send("m1", "m2", None, None, "sent while on")
    assert off.read_unread("m2") == [] and off.history_for("m2", 5) == []
    assert off.messages() == []
    # Refusals still apply when the bus is off: the caller learns its mistake either way.
    with pytest.raises(ConfigError):
        off.send("m1", "nobody", None, None, "x")
    assert contents(on.read_unread("m2")) == ["sent while on"]


def test_every_bus_key_is_one_of_the_runs(bus: MessageBus, conn: redis.Redis, run_id: str) -> None:
    bus.broadcast("m1", None, None, "hi")
    bus.read_unread("m2")
    keys = RunKeys(run_id)
    assert sorted(conn.keys("*")) == sorted(
        [
            keys.bus,
            keys.bus_seq,
            keys.inbox("m2"),
            keys.inbox("m3"),
            keys.read_offsets,
            keys.roster,
            keys.roster_ver,
        ]
    )
    assert conn.type(keys.bus) == "stream"
    entry_id, fields = conn.xrange(keys.bus)[0]
    assert fields == {
        "from": "m1",
        "to": "*",
        "type": "peer.broadcast",
        "task_id": "",
        "content": "hi",
        "created_at": fields["created_at"],
    }
    assert conn.hgetall(keys.read_offsets) == {"m2": entry_id}


def test_trimming_keeps_the_cap_once_everyone_has_read(conn: redis.Redis, run_id: str) -> None:
    bus = roster_bus(conn, run_id, MEMBERS, bus_maxlen=20)
    for i in range(50):
        bus.broadcast("m1", None, None, f"n{i}")
        bus.read_unread("m2")
        bus.read_unread("m3")
    keys = RunKeys(run_id)
    # Past 22 (the cap plus a tenth) the bus is cut back to 20: the 50th message made such a cut.
    assert contents(bus.messages()) == [f"n{i}" for i in range(30, 50)]
    assert conn.xlen(keys.inbox("m2")) == conn.xlen(keys.bus)
    assert contents(bus.history_for("m3", 3)) == ["n47", "n48", "n49"]


def test_trimming_never_drops_a_message_someone_has_not_read(
    conn: redis.Redis, run_id: str
) -> None:
    bus = roster_bus(conn, run_id, MEMBERS, bus_maxlen=20)
    bus.send("m1", "m3", None, None, "for m3, unread")
    for i in range(60):
        bus.send("m1", "m2", None, None, f"n{i}")
        bus.read_unread("m2")
    keys = RunKeys(run_id)
    # m3's unread message pins everything after it: nothing could be dropped.
    assert conn.xlen(keys.bus) == 61
    assert contents(bus.read_unread("m3")) == ["for m3, unread"]
    assert bus.trim() == 41
    assert contents(bus.messages()) == [f"n{i}" for i in range(40, 60)]
    assert conn.xlen(keys.inbox("m3")) == 0
    assert conn.xlen(keys.inbox("m2")) == 20


def test_trimming_cuts_up_to_the_oldest_unread_message(conn: redis.Redis, run_id: str) -> None:
    bus = roster_bus(conn, run_id, MEMBERS, bus_maxlen=10)
    for i in range(30):
        bus.send("m1", "m2", None, None, f"n{i}")
    assert len(bus.read_unread("m2")) == 30
    bus.send("m1", "m3", None, None, "pin")
    for i in range(30, 40):
        bus.send("m1", "m2", None, None, f"n{i}")
    bus.read_unread("m2")
    bus.trim()
    assert contents(bus.messages()) == ["pin", *(f"n{i}" for i in range(30, 40))]
    assert contents(bus.read_unread("m3")) == ["pin"]


def test_the_returned_envelope_is_what_readers_get(bus: MessageBus) -> None:
    unaddressed = bus.publish("system", "", "note", "", "to nobody")
    direct = bus.send("m2", "m1", "question", "t1", "direct")
    assert unaddressed is not None and (unaddressed.to, unaddressed.task_id) == (None, None)
    assert bus.read_unread("m1") == [unaddressed, direct]
    assert bus.messages() == [unaddressed, direct]
    assert bus.history_for("m1", 0) == [unaddressed, direct]


def test_a_bus_built_without_a_member_list_trims_by_the_roster_in_redis(
    conn: redis.Redis, run_id: str
) -> None:
    members_bus = roster_bus(conn, run_id, MEMBERS, bus_maxlen=5)
    members_bus.send("m1", "m2", None, None, "unread by m2")
    other = MessageBus(conn, RunKeys(run_id), bus_maxlen=5)
    for i in range(20):
        other.publish("system", "lead", "note", None, f"n{i}")
    # It trimmed (past 5 + 0) but m2's unread message pins everything after it.
    assert len(other.messages()) == 21
    assert contents(members_bus.read_unread("m2")) == ["unread by m2"]


def test_a_bus_without_a_roster_in_redis_never_trims(conn: redis.Redis, run_id: str) -> None:
    bus = MessageBus(conn, RunKeys(run_id), bus_maxlen=5)
    for i in range(20):
        bus.publish("system", "lead", "note", None, f"n{i}")
    assert len(bus.messages()) == 20


def test_a_bus_follows_roster_changes_without_being_rebuilt(conn: redis.Redis, run_id: str) -> None:
    bus = roster_bus(conn, run_id, ["m1", "m2"], bus_maxlen=10)
    bus.broadcast("m1", None, None, "before")
    assert bus.roster().version == 1
    keys = RunKeys(run_id)
    # Another process changes the roster (as a persistent team will): m3 joins, m2 leaves.
    write_roster(conn, keys, ["m1", "m3"])
    # The cached copy is stale; the publish script refuses it and the bus reads the roster anew.
    bus.broadcast("m1", None, None, "after")
    assert bus.roster().version == 2 and bus.member_ids == ["m1", "m3"]
    assert contents(bus.read_unread("m3")) == ["after"]
    assert contents(bus.history_for("m1", 0)) == []
    assert conn.xlen(keys.inbox("m2")) == 1  # m2 got only what was sent before it left
    # A direct message to a member who joined after the bus last looked is accepted too.
    write_roster(conn, keys, ["m1", "m3", "m4"])
    assert bus.send("m1", "m4", None, None, "welcome") is not None
    assert contents(bus.read_unread("m4")) == ["welcome"]
    with pytest.raises(ConfigError, match="unknown team member 'm2'"):
        bus.send("m1", "m2", None, None, "gone")


def test_a_trim_on_a_stale_roster_protects_the_members_who_joined(
    conn: redis.Redis, run_id: str
) -> None:
    stale = roster_bus(conn, run_id, ["m1", "m2"], bus_maxlen=3)
    for i in range(3):
        stale.send("m1", "m2", None, None, f"n{i}")
    stale.read_unread("m2")
    write_roster(conn, RunKeys(run_id), ["m1", "m2", "m3"])
    fresh = MessageBus(conn, RunKeys(run_id), bus_maxlen=100)  # no trims of its own
    fresh.send("m1", "m3", None, None, "unread by m3")
    for i in range(3, 6):
        fresh.send("m1", "m2", None, None, f"n{i}")
    fresh.read_unread("m2")
    # `stale` still lists m1 and m2 only: trimming by that list would drop m3's message.
    assert stale.roster().member_ids == ("m1", "m2")
    assert stale.trim() == 3
    assert stale.roster().member_ids == ("m1", "m2", "m3")
    assert contents(stale.messages()) == ["unread by m3", "n3", "n4", "n5"]
    assert contents(fresh.read_unread("m3")) == ["unread by m3"]


def test_created_at_is_the_redis_clock_and_follows_stream_order(conn: redis.Redis) -> None:
    """Publishers on hosts with skewed clocks still produce messages whose times follow the bus."""
    bus = roster_bus(conn, "clock", ["m1", "m2"])
    sent = [bus.send("m1", "m2", None, None, f"n{i}") for i in range(5)]
    stored = bus.messages()
    assert [m.created_at for m in stored] == [m.created_at for m in sent]
    assert [m.created_at for m in stored] == sorted(m.created_at for m in stored)
    # The stream id's time part is Redis's clock too: they agree (within a millisecond).
    assert all(abs(int(m.id.split("-")[0]) - m.created_at) <= 1 for m in stored)


def claimed_task(conn: redis.Redis, run_id: str) -> tuple[TaskBoard, int]:
    """A board with task t1 for m2, claimed; and the claim's token."""
    board = TaskBoard(conn, RunKeys(run_id))
    board.create([TaskSpec(id="t1", member_id="m2", task="t1")])
    token = board.claim("t1", "m2", "w", 30)
    assert token is not None
    return board, token


def reclaim(board: TaskBoard, task_id: str) -> int:
    """What the coordinator does when the claim's heartbeat expires; then the next claim."""
    board.conn.delete(board.keys.heartbeat(task_id))
    assert board.reclaim_expired(max_attempts=3) == [task_id]
    token = board.claim(task_id, "m2", "w", 30)
    assert token is not None
    return token


def test_what_a_lost_attempt_read_goes_to_the_next_attempt_first(
    bus: MessageBus, conn: redis.Redis, run_id: str
) -> None:
    board, first = claimed_task(conn, run_id)
    bus.send("m1", "m2", None, None, "early")
    assert contents(bus.read_unread("m2", "t1", first)) == ["early"]
    # The same attempt reading again gets only what is new.
    bus.send("m1", "m2", None, None, "later")
    assert contents(bus.read_unread("m2", "t1", first)) == ["later"]

    second = reclaim(board, "t1")
    bus.send("m1", "m2", None, None, "newest")
    # The lost attempt cannot acknowledge any more: its token no longer holds the task.
    assert bus.acknowledge_reads("t1", first, ["m2"]) is False
    assert contents(bus.read_unread("m2", "t1", second)) == ["early", "later", "newest"]
    assert bus.read_unread("m2", "t1", second) == []
    # Once the next attempt acknowledged them, they are never delivered again.
    assert bus.acknowledge_reads("t1", second, ["m2"]) is True
    third = reclaim(board, "t1")
    assert bus.read_unread("m2", "t1", third) == []
    assert conn.hlen(RunKeys(run_id).unacked_reads) == 0


def test_unacknowledged_reads_stay_with_their_task_and_member(
    bus: MessageBus, conn: redis.Redis, run_id: str
) -> None:
    board, token = claimed_task(conn, run_id)
    bus.broadcast("m1", None, None, "to all")
    assert contents(bus.read_unread("m2", "t1", token)) == ["to all"]
    # Another member, and the same member outside that task, have their own reads.
    assert contents(bus.read_unread("m3", "t1", token)) == ["to all"]
    assert bus.read_unread("m2") == []
    reclaim(board, "t1")
    assert bus.read_unread("m2", "t2", 99) == []


def test_trimming_keeps_what_an_attempt_read_but_did_not_acknowledge(
    conn: redis.Redis, run_id: str
) -> None:
    bus = roster_bus(conn, run_id, MEMBERS, bus_maxlen=10)
    board, first = claimed_task(conn, run_id)
    bus.send("m1", "m2", None, None, "owed")
    assert contents(bus.read_unread("m2", "t1", first)) == ["owed"]
    for i in range(30):
        bus.send("m1", "m2", None, None, f"n{i}")
        bus.read_unread("m2")
    bus.trim()
    assert contents(bus.messages())[0] == "owed"
    assert contents(bus.read_unread("m2", "t1", reclaim(board, "t1"))) == ["owed"]
    assert bus.acknowledge_reads("t1", board.get("t1").token, MEMBERS)
    bus.trim()
    assert contents(bus.messages()) == [f"n{i}" for i in range(20, 30)]


@pytest.mark.parametrize(
    ("task_id", "says"),
    [
        ("t" * 300_000, "invalid task id"),
        ("task_1\n", "invalid task id"),
        ("../t1", "invalid task id"),
        ("Task 1", "invalid task id"),
    ],
)
def test_every_envelope_field_is_checked_not_only_the_content(
    conn: redis.Redis, run_id: str, task_id: str, says: str
) -> None:
    bus = roster_bus(conn, run_id, MEMBERS, max_message_bytes=1000)
    with pytest.raises(ConfigError, match=says):
        bus.send("m1", "m2", None, task_id, "hi")
    with pytest.raises(ConfigError, match=says):
        bus.broadcast("m1", None, task_id, "hi")
    with pytest.raises(ConfigError, match=says):
        bus.publish("system", "m1", "task.assigned", task_id, "hi")
    assert bus.messages() == []


def test_the_whole_envelope_counts_against_the_limit(conn: redis.Redis, run_id: str) -> None:
    bus = roster_bus(conn, run_id, MEMBERS, max_message_bytes=200)
    assert bus.send("m1", "m2", None, "t" * 128, "x" * 10) is not None
    with pytest.raises(ConfigError, match=r"message is \d+ bytes.*the limit is 200 bytes"):
        bus.send("m1", "m2", "n" * 64, "t" * 128, "x" * 10)
    assert len(bus.messages()) == 1


@pytest.mark.parametrize(
    ("sender", "to", "type_"),
    [
        ("system\n", "m1", "task.assigned"),
        ("s" * 10_000, "m1", "task.assigned"),
        ("system", "m1\n", "task.assigned"),
        ("system", "x" * 10_000, "task.assigned"),
        ("system", "m1", "t" * 10_000),
        ("system", "m1", "task assigned"),
    ],
)
def test_runtime_publishes_are_checked_for_shape(
    bus: MessageBus, sender: str, to: str, type_: str
) -> None:
    with pytest.raises(ConfigError):
        bus.publish(sender, to, type_, None, "hi")
    assert bus.messages() == []
