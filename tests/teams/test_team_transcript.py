"""`teamctl team transcript` and the dashboard's transcript pages: a teammate's conversation
turn by turn (what it was given, its replies, its tool calls and their results), printed safe for
a terminal, one turn at a time, or as JSON, and paged by turn, escaped; the lead's own
conversation; the errors; turns whose first messages the memory caps dropped. Real Redis, the
session's real workers, the scripted model server through litellm, the dashboard under real
uvicorn."""

from __future__ import annotations

import json
import time
from typing import Any

import markupsafe
import redis
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import SystemType
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.shared.teams.transcripts import mark_turn
from teamctl.shared.text import duration_text

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import base_args, cli, lead_args, spawn
from tests.support.waiting import wait_until
from tests.support.web import HOSTILE, served, signed_in

TURN_S = 60
SAID = "telling the lead\n\x1b[31mred\x1b]0;title\x07 and \ttabbed"
"""A reply over two lines, with a colour, a window title and a tab in it: model text that must
reach no terminal as it is."""
ARGUMENTS = {"to": "lead", "content": f"hi lead {HOSTILE}"}


def marks(conn: redis.Redis, key: str) -> list[dict[str, Any]]:
    """A turns stream's entries, each with its time (ms)."""
    return [{**fields, "ms": int(entry_id.split("-")[0])} for entry_id, fields in conn.xrange(key)]


def header(conn: redis.Redis, key: str, turn: int) -> str:
    """The header line the CLI prints for `turn`, from the marks the turn left."""
    begin, end = (
        next(m for m in marks(conn, key) if m["kind"] == kind and m["turn"] == str(turn))
        for kind in ("begin", "end")
    )
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(begin["ms"] / 1000))
    return (
        f"turn {turn}  {started}  ended {end['detail']} after "
        f"{duration_text(end['ms'] - begin['ms'])}"
    )


def lead_memory(store: TeamStore) -> list[dict[str, Any]]:
    """The lead's memory as stored."""
    return [json.loads(raw) for raw in store.conn.lrange(store.keys.lead_memory, 0, -1)]


def alice_with_two_turns(workers: str, llm: ScriptedLLM, team: str) -> TeamStore:
    """alice's first turn sends the lead a message (a tool call) and answers; her second, woken
    by the lead's message, answers it."""
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("send_message", ARGUMENTS)], content=SAID), "told the lead", "checked b"],
    )
    store = TeamStore(redis.Redis.from_url(workers, decode_responses=True), team)
    assert spawn(workers, team, "alice", alice, llm.api_base).exit_code == 0
    wait_until(
        lambda: store.get("alice").status is TeammateStatus.IDLE,
        TURN_S,
        message="alice's first turn",
    )
    sent = cli("team", "send", "alice", "check b", *base_args(workers, team))
    assert sent.exit_code == 0, sent.output
    wait_until(
        lambda: (
            len(store.messages.notices(SystemType.TEAMMATE_IDLE)) == 2
            and store.get("alice").status is TeammateStatus.IDLE
        ),
        TURN_S,
        message="alice's second turn",
    )
    return store


def test_a_teammates_turns_print_line_by_line_one_at_a_time_or_as_json(
    workers: str, llm: ScriptedLLM, team: str
) -> None:
    store = alice_with_two_turns(workers, llm, team)
    conn, key = store.conn, store.keys.turns("alice")
    result = next(m for m in store.turns.memory("alice") if m["role"] == "tool")["content"]
    assert json.loads(result)["action"] == "send_message" and len(result) < 300
    first = [
        header(conn, key, 1),
        "  user: You are alice. Start.",
        "  reply: telling the lead",
        "      red and     tabbed",
        f"  call send_message({json.dumps(ARGUMENTS)})",
        f"  result send_message: {result}",
        "  reply: told the lead",
    ]
    second = [
        header(conn, key, 2),
        "  inbox from lead (peer.message): check b",
        "  reply: checked b",
    ]
    assert [(m["kind"], m["turn"]) for m in marks(conn, key)] == [
        ("begin", "1"),
        ("end", "1"),
        ("begin", "2"),
        ("end", "2"),
    ]
    assert marks(conn, key)[2]["detail"] == store.get("alice").worker  # who ran turn 2

    shown = cli("team", "transcript", "alice", *base_args(workers, team))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == first + second
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout

    one = cli("team", "transcript", "alice", "--turn", "2", *base_args(workers, team))
    assert (one.exit_code, one.stdout.splitlines()) == (0, second)

    missing = cli("team", "transcript", "alice", "--turn", "3", *base_args(workers, team))
    assert (missing.exit_code, missing.stdout) == (2, "")
    assert missing.stderr.splitlines() == [
        f"teamctl: alice of team {team} has no turn 3 in its memory; its turns: 1-2"
    ]

    dumped = cli("team", "transcript", "alice", "--json", *base_args(workers, team))
    assert dumped.exit_code == 0, dumped.output
    assert "\x1b" not in dumped.stdout and dumped.stdout.isascii()
    data = json.loads(dumped.stdout)
    assert (data["team"], data["member"]) == (team, "alice")
    assert [(t["turn"], t["ended"], t["running"], t["cut"]) for t in data["turns"]] == [
        (1, "done", False, False),
        (2, "done", False, False),
    ]
    call = data["turns"][0]["entries"][2]
    assert (call["kind"], call["name"], json.loads(call["text"])) == (
        "call",
        "send_message",
        ARGUMENTS,
    )
    assert [(e["kind"], e["text"]) for e in data["turns"][0]["entries"]] == [
        ("user", "You are alice. Start."),
        ("reply", SAID),
        ("call", json.dumps(ARGUMENTS)),
        ("result", result),
        ("reply", "told the lead"),
    ]
    inbox = data["turns"][1]["entries"][0]
    assert (inbox["kind"], inbox["sender"], inbox["type"], inbox["text"]) == (
        "inbox",
        LEAD,
        "peer.message",
        "check b",
    )
    assert inbox["message_id"] == next(
        m.id for m in store.bus.messages() if m.from_ == LEAD and m.to == "alice"
    )
    store.delete()


def test_an_unknown_teammate_or_team_is_one_line_and_exit_2(redis_url: str, team: str) -> None:
    store = TeamStore(redis.Redis.from_url(redis_url, decode_responses=True), team)
    store.create(TeamOptions())
    store.spawn(
        "alice", role="dev", prompt="start", model="m", api_base=None, queue="transcript-nobody"
    )  # a queue no worker serves: its turn waits
    unknown = cli("team", "transcript", "bob", *base_args(redis_url, team))
    assert (unknown.exit_code, unknown.stdout) == (2, "")
    assert unknown.stderr.splitlines() == [
        f"teamctl: unknown teammate 'bob' in team {team}; teammates: alice"
    ]
    no_team = cli("team", "transcript", "alice", *base_args(redis_url, f"{team}x"))
    assert (no_team.exit_code, no_team.stdout) == (2, "")
    assert len(no_team.stderr.splitlines()) == 1
    assert no_team.stderr.startswith(f"teamctl: no team '{team}x'")
    # Spawned, its turn not begun: its prompt waits under the turn that will take it.
    waiting = cli("team", "transcript", "alice", *base_args(redis_url, team))
    assert (waiting.exit_code, waiting.stdout.splitlines()) == (
        0,
        ["before the recorded turns", "  user: start"],
    )
    assert (
        cli("team", "transcript", "lead", *base_args(redis_url, team)).stdout
        == "lead: no conversation in memory yet\n"
    )


def test_the_leads_own_conversation_prints_turn_by_turn(
    workers: str, llm: ScriptedLLM, team: str
) -> None:
    lead = llm.script(
        f"lead-{team}", [ToolCalls([("list_teammates", {})]), "nobody yet", "fresh start"]
    )
    store = TeamStore(redis.Redis.from_url(workers, decode_responses=True), team)
    store.create(TeamOptions())
    said = cli(*lead_args(workers, team, lead, llm.api_base, "-m", "Who is here?"))
    assert said.exit_code == 0, said.output
    key = store.keys.lead_turns
    listed = json.loads(lead_memory(store)[2]["content"])
    assert listed == {"action": "list_teammates", "ok": True, "teammates": []}
    shown = cli("team", "transcript", "lead", *base_args(workers, team))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == [
        header(store.conn, key, 1),
        "  user: Who is here?",
        "  call list_teammates({})",
        f"  result list_teammates: {lead_memory(store)[2]['content']}",
        "  reply: nobody yet",
    ]

    # `--new` begins another conversation: its turns count from 1 again, the old ones gone.
    again = cli(*lead_args(workers, team, lead, llm.api_base, "--new", "-m", "Again."))
    assert again.exit_code == 0, again.output
    shown = cli("team", "transcript", "lead", *base_args(workers, team))
    begins = [m for m in marks(store.conn, key) if m["kind"] == "begin"]
    assert [(m["turn"], m["epoch"]) for m in begins] == [("1", "0"), ("1", "1")]
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(begins[-1]["ms"] / 1000))
    end = [m for m in marks(store.conn, key) if m["kind"] == "end"][-1]
    assert shown.stdout.splitlines() == [
        f"turn 1  {started}  ended done after {duration_text(end['ms'] - begins[-1]['ms'])}",
        "  user: Again.",
        "  reply: fresh start",
    ]
    store.delete()


def test_turns_whose_first_messages_left_memory_say_so_and_keep_their_numbers(
    redis_url: str, team: str
) -> None:
    store = TeamStore(redis.Redis.from_url(redis_url, decode_responses=True), team)
    store.create(TeamOptions(memory_max_messages=4))
    store.spawn(
        "alice", role="dev", prompt="start", model="m", api_base=None, queue="transcript-nobody"
    )
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"

    def turn(number: int, *messages: dict[str, Any]) -> None:
        assert mark_turn(store, "alice", token, "begin", "test:1") == number
        for message in messages:
            assert store.turns.checkpoint("alice", token, "", [message]) is True
        assert mark_turn(store, "alice", token, "end", "done") == number

    def said(role: str, *texts: str) -> list[dict[str, Any]]:
        return [{"role": role, "content": text} for text in texts]

    turn(1, *said("assistant", "one"))
    turn(
        2,
        *said("user", "a?"),
        *said("assistant", "a"),
        *said("user", "b?"),
        *said("assistant", "b"),
    )
    turn(3, *said("user", "c?"), *said("assistant", "c"))
    # The caps dropped turn 1 whole and turn 2's first exchange: the rest keeps its numbers.
    assert [m["content"] for m in store.turns.memory("alice")] == ["b?", "b", "c?", "c"]
    shown = cli("team", "transcript", "alice", *base_args(redis_url, team))
    key = store.keys.turns("alice")
    assert (shown.exit_code, shown.stdout.splitlines()) == (
        0,
        [
            header(store.conn, key, 2) + "  (its first messages left memory)",
            "  user: b?",
            "  reply: b",
            header(store.conn, key, 3),
            "  user: c?",
            "  reply: c",
        ],
    )
    missing = cli("team", "transcript", "alice", "--turn", "1", *base_args(redis_url, team))
    assert (missing.exit_code, missing.stderr) == (
        2,
        f"teamctl: alice of team {team} has no turn 1 in its memory; its turns: 2-3\n",
    )
    # A turn that began but wrote no end (its worker died) says so; a stale token marks nothing.
    assert mark_turn(store, "alice", token, "begin", "test:1") == 4
    assert mark_turn(store, "alice", "stale", "end", "done") is None
    assert (
        cli("team", "transcript", "alice", "--turn", "4", *base_args(redis_url, team))
        .stdout.splitlines()[0]
        .endswith("  running")
    )
    store.conn.delete(store.keys.turn("alice"))
    assert (
        cli("team", "transcript", "alice", "--turn", "4", *base_args(redis_url, team))
        .stdout.splitlines()[0]
        .endswith("  no end recorded")
    )


def test_the_team_page_links_each_transcript_and_pages_it_by_turn(
    workers: str, llm: ScriptedLLM, team: str
) -> None:
    store = alice_with_two_turns(workers, llm, team)
    with served(workers) as base, signed_in(base) as client:
        page = client.get(f"/teams/{team}")
        assert page.status_code == 200
        link = f"/teams/{team}/members/alice/transcript"
        assert f'href="{link}"' in page.text
        assert f'href="/teams/{team}/members/lead/transcript"' in page.text

        first = client.get(link, params={"turn": "1"})
        assert first.status_code == 200
        assert "<b>call send_message</b>" in first.text
        assert str(markupsafe.escape(json.dumps(ARGUMENTS))) in first.text
        assert HOSTILE not in first.text
        result = next(m for m in store.turns.memory("alice") if m["role"] == "tool")["content"]
        assert f"<b>result send_message</b>\n<pre>{markupsafe.escape(result)}</pre>" in first.text
        assert "checked b" not in first.text and 'rel="next" href="?turn=2"' in first.text

        last = client.get(link)  # the last turn by default
        assert last.status_code == 200
        assert "<pre>checked b</pre>" in last.text and "send_message" not in last.text
        assert 'rel="prev" href="?turn=1"' in last.text

        missing = client.get(link, params={"turn": "7"})
        assert (missing.status_code, missing.text) == (
            404,
            f"alice of team {team} has no turn 7 in its memory; its turns: 1-2",
        )
        assert client.get(f"/teams/{team}/members/bob/transcript").status_code == 404
        lead = client.get(f"/teams/{team}/members/lead/transcript")
        assert lead.status_code == 200 and "No conversation in memory yet." in lead.text
    store.delete()
