"""Members' transcripts: kept once per task while the claim holds, capped with a note."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.transcripts import Transcripts, capped
from teamctl.shared.task_records import TaskSpec

from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import member_answer, script_run
from tests.support.teamfile import team_file

TOOL_ROUNDS = 8
CAP = 3_000
MESSAGES = [
    {"role": "system", "content": "You are m1."},
    {"role": "user", "content": "Do A"},
    {"role": "assistant", "content": "done"},
]


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
    assert kept[2] == {
        "role": "teamctl",
        "content": f"{left_out} messages left out (transcript_max_chars=1000)",
    }
    assert kept[3:] == steps[-len(kept[3:]) :]  # the latest, in order, none skipped
    assert capped(MESSAGES, 10_000) == MESSAGES


def test_a_capped_transcript_never_exceeds_the_cap() -> None:
    long_head = [{"role": "system", "content": "s" * 3000}, {"role": "user", "content": "Do A"}]
    messages = [*long_head, *({"role": "tool", "content": f"r{i} " + "é" * 40} for i in range(30))]
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
    conn: redis.Redis,
) -> None:
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


def test_a_run_keeps_each_member_s_tool_calls_capped_at_transcript_max_chars(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """Through a run: m1 calls team_list_tasks TOOL_ROUNDS times, then answers; its member
    result's transcript keeps the head, a note and the latest exchanges within the cap."""

    def handler(body: dict[str, Any]) -> Any:
        if sum(m.get("role") == "tool" for m in body["messages"]) < TOOL_ROUNDS:
            return ToolCalls([("team_list_tasks", {})])
        return member_answer(body)

    models = script_run(llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}], member=handler)
    team = team_file(tmp_path / "t.toml", models, options={"transcript_max_chars": CAP})
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    [member] = json.loads(result.stdout)["member_results"]
    transcript = member["transcript"]
    assert len(json.dumps(transcript, ensure_ascii=False)) <= CAP
    assert [m["role"] for m in transcript[:3]] == ["system", "user", "teamctl"]
    left_out = int(transcript[2]["content"].split()[0])
    # 2 head + TOOL_ROUNDS (assistant call + tool result) + the answer, less what was kept.
    assert left_out == 2 + 2 * TOOL_ROUNDS + 1 - (len(transcript) - 1)
    assert transcript[2]["content"].endswith(f"(transcript_max_chars={CAP})")
    tail = transcript[3:]
    # The stored transcript names the model that answered each step, beside the messages.
    assert tail[-1] == {"role": "assistant", "content": "output of a", "model": models["member"]}
    calls = [m for m in tail if m.get("tool_calls")]
    results = [m for m in tail if m["role"] == "tool"]
    assert calls and results and "team_list_tasks" in json.dumps(calls)
    assert '"action": "team_list_tasks"' in results[-1]["content"].replace('":"', '": "')
