"""Members' transcripts: kept once per task while the claim holds, capped with a note."""

from __future__ import annotations

import json

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.models import TaskSpec
from teamctl.shared.transcripts import Transcripts, capped

MESSAGES = [{"role": "system", "content": "You are m1."}, {"role": "user", "content": "Do A"},
            {"role": "assistant", "content": "done"}]


def test_a_transcript_is_kept_only_while_the_claim_holds(conn: redis.Redis) -> None:
    keys = RunKeys("r1")
    board = TaskBoard(conn, keys)
    board.create([TaskSpec(id="a", member_id="m1", task="A")])
    first = board.claim("a", "m1", "host:1", 30)
    assert first is not None
    transcripts = Transcripts(conn, keys)
    assert transcripts.save("a", first, MESSAGES, 10_000)
    conn.delete(keys.heartbeat("a"))  # its worker died: the claim expired
    assert board.reclaim_expired(3) == ["a"]
    second = board.claim("a", "m1", "host:2", 30)
    assert second is not None and second != first

    assert not transcripts.save("a", first, [{"role": "user", "content": "stale"}], 10_000)
    assert board.get("a").stale_writes == 0  # the outcome write that follows counts, once
    assert transcripts.load_many(["a", "b"]) == {"a": MESSAGES}
    assert Transcripts(conn, keys).save("a", second, MESSAGES[:2], 0)  # 0: none kept
    assert transcripts.load_many(["a"]) == {"a": MESSAGES}


def test_a_long_transcript_keeps_its_head_and_latest_messages_with_a_note() -> None:
    steps = [{"role": "tool", "content": f"result {i} " + "x" * 80} for i in range(50)]
    messages = [*MESSAGES[:2], *steps]
    kept = capped(messages, 1_000)

    assert kept[:2] == MESSAGES[:2] and kept[-1] == steps[-1]
    assert len(json.dumps(kept)) <= 1_000  # the note counted too
    left_out = len(messages) - (len(kept) - 1)
    assert kept[2] == {"role": "teamctl", "content": f"{left_out} messages left out "
                                                     "(transcript_max_chars=1000)"}
    assert kept[3:] == steps[-len(kept[3:]):]  # the latest, in order, none skipped
    assert capped(MESSAGES, 10_000) == MESSAGES


def test_a_capped_transcript_never_exceeds_the_cap() -> None:
    long_head = [{"role": "system", "content": "s" * 3000}, {"role": "user", "content": "Do A"}]
    messages = [*long_head, *({"role": "tool", "content": f"r{i} " + "é" * 40}
                              for i in range(30))]
    for cap in (2, 60, 150, 400, 1_000, 2_500, 4_000):  # 2: "[]", the least a list takes
        kept = capped(messages, cap)
        assert len(json.dumps(kept, ensure_ascii=False)) <= cap, cap
    # Only the head was too long: it is cut, every other message is kept, and no note says
    # that nothing was left out.
    short = [*long_head, {"role": "assistant", "content": "done"}]
    kept = capped(short, 1_000)
    assert kept[0]["content"].endswith(" [cut]") and kept[1:] == short[1:]
    assert all(m["role"] != "teamctl" for m in kept)


def test_an_attempt_without_a_session_removes_an_earlier_attempt_s_transcript(
        conn: redis.Redis) -> None:
    """The first attempt saved its transcript, then lost its claim; the second failed before
    its session started (an MCP server that would not start): no stale transcript is left
    beside the second attempt's error."""
    keys = RunKeys("r2")
    board = TaskBoard(conn, keys)
    board.create([TaskSpec(id="a", member_id="m1", task="A")])
    first = board.claim("a", "m1", "host:1", 30)
    transcripts = Transcripts(conn, keys)
    assert transcripts.save("a", first, MESSAGES, 10_000)
    conn.delete(keys.heartbeat("a"))
    assert board.reclaim_expired(3) == ["a"]
    second = board.claim("a", "m1", "host:2", 30)

    assert not transcripts.save("a", first, None, 10_000)  # stale: refused, nothing removed
    assert transcripts.load_many(["a"]) == {"a": MESSAGES}
    assert transcripts.save("a", second, None, 10_000)
    assert transcripts.load_many(["a"]) == {}
