"""`teamctl team fork`: a new teammate with another's memory as it stood after one of its turns
and the other's grants, never wider; its next turn goes on from that history alone (the next
model request holds the turn it was forked after, not the source's later ones), the source is
left as it was, and bad input is one line and exit 2. Real Redis, the session's real workers,
the scripted model server through litellm; turns played by hand through the store's own scripts
where a test needs a turn held open or the memory caps to drop a turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.teams.forks import MEMORY_PAGE_MESSAGES
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import Teammate, TeammateStatus
from teamctl.shared.teams.transcripts import mark_turn

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import base_args, cli, spawn
from tests.support.waiting import wait_until
from tests.support.web import served, signed_in

TURN_S = 60
GRANTS = ("tools", "mcp", "workspace", "api_base", "queue", "fallbacks")
"""What a fork takes from its source as it is (its model too, unless --model names another
one the source may call or the team grants)."""
IDLE_QUEUE = "fork-nobody"
"""A queue no worker serves: a turn enqueued there waits, and the test plays turns by hand."""


def grants(teammate: Teammate) -> dict[str, Any]:
    return {field: getattr(teammate, field) for field in GRANTS}


def marks(conn: redis.Redis, key: str) -> list[tuple[str, dict[str, str]]]:
    return [(entry_id, fields) for entry_id, fields in conn.xrange(key)]


def idle_after(store: TeamStore, name: str, messages: int) -> bool:
    """`name` is idle with `messages` messages in memory: its turn ended."""
    teammate = store.get(name)
    return teammate.status is TeammateStatus.IDLE and len(store.turns.memory(name)) == messages


def said(role: str, *texts: str) -> list[dict[str, Any]]:
    return [{"role": role, "content": text} for text in texts]


def test_a_fork_after_turn_1_goes_on_from_turn_1_with_the_sources_grants(
    workers: str, llm: ScriptedLLM, team: str
) -> None:
    alice = llm.script(
        f"alice-{team}",
        [
            ToolCalls([("send_message", {"to": "lead", "content": "hi lead"})]),
            "told the lead",
            "checked b",
            "carol answers",
        ],
    )
    other = llm.script(f"other-{team}", ["retried"])
    store = TeamStore(redis.Redis.from_url(workers, decode_responses=True), team)
    store.create(TeamOptions(grantable_models=[other]))
    tools = ("--tool", "read_file", "--tool", "list_files")
    assert spawn(workers, team, "alice", alice, llm.api_base, *tools).exit_code == 0
    wait_until(lambda: idle_after(store, "alice", 4), TURN_S, message="alice's first turn")
    after_turn_1 = store.turns.memory("alice")
    sent = cli("team", "send", "alice", "check b", *base_args(workers, team))
    assert sent.exit_code == 0, sent.output
    wait_until(lambda: idle_after(store, "alice", 6), TURN_S, message="alice's second turn")
    source = store.get("alice")
    memory, turns = store.turns.memory("alice"), marks(store.conn, store.keys.turns("alice"))

    forked = cli(
        "team", "fork", "alice", "--as", "bob", "--at-turn", "1", "--model", other,
        *base_args(workers, team),
    )  # fmt: skip
    assert (forked.exit_code, forked.stderr) == (0, ""), forked.output
    assert forked.stdout.splitlines() == [
        f"bob is idle in team {team}, forked from alice after turn 1 (model {other})"
    ]
    bob = store.get("bob")
    assert store.turns.memory("bob") == after_turn_1
    assert (bob.status, bob.model, bob.role, bob.prompt) == (
        TeammateStatus.IDLE,
        other,
        source.role,
        source.prompt,
    )
    assert grants(bob) == grants(source)
    assert bob.tools == ["read_file", "list_files"]
    assert bob.forked_from is not None
    assert bob.forked_from.model_dump() == {"teammate": "alice", "turn": 1}
    assert store.messages.peek("bob")[1] == []  # an inbox of its own, empty

    # Its first turn: the model is given turn 1 and the new mail, nothing of alice's turn 2.
    sent = cli("team", "send", "bob", "try again", *base_args(workers, team))
    assert (sent.exit_code, sent.stdout) == (0, "sent to bob (woke it)\n")
    wait_until(lambda: idle_after(store, "bob", 6), TURN_S, message="bob's first turn")
    (request,) = llm.requests[f"other-{team}"]
    given = request["messages"]
    assert given[0]["role"] == "system" and "Name: bob\n" in given[0]["content"]
    assert [m.get("content") for m in given[1:5]] == [m.get("content") for m in after_turn_1]
    assert given[5]["role"] == "user" and "try again" in given[5]["content"]
    assert len(given) == 6 and "check b" not in json.dumps(request)
    assert store.turns.memory("bob")[:4] == after_turn_1
    assert store.turns.memory("bob")[5] == {"role": "assistant", "content": "retried"}

    # Its turns count on from turn 1; turn 1 reads as alice's does.
    one = cli("team", "transcript", "bob", "--turn", "1", *base_args(workers, team))
    assert one.exit_code == 0, one.output
    assert (
        one.stdout
        == cli("team", "transcript", "alice", "--turn", "1", *base_args(workers, team)).stdout
    )
    two = cli("team", "transcript", "bob", "--turn", "2", *base_args(workers, team))
    assert two.stdout.splitlines()[1:] == [
        "  inbox from lead (peer.message): try again",
        "  reply: retried",
    ]

    # By default a fork goes on from the last ended turn; --prompt is the lead's first message.
    prompted = cli(
        "team", "fork", "alice", "--as", "carol", "--prompt", "and now?",
        *base_args(workers, team),
    )  # fmt: skip
    assert prompted.exit_code == 0, prompted.output
    assert prompted.stdout.splitlines() == [
        f"carol is idle in team {team}, forked from alice after turn 2 (model {alice})",
        "sent to carol (woke it)",
    ]
    wait_until(lambda: idle_after(store, "carol", 8), TURN_S, message="carol's first turn")
    assert store.turns.memory("carol")[:6] == memory
    assert store.turns.memory("carol")[7] == {"role": "assistant", "content": "carol answers"}
    assert grants(store.get("carol")) == grants(source)

    listed = cli("team", "list", "--json", *base_args(workers, team))
    assert [(m["name"], m["forked_from"]) for m in json.loads(listed.stdout)] == [
        ("alice", None),
        ("bob", {"teammate": "alice", "turn": 1}),
        ("carol", {"teammate": "alice", "turn": 2}),
    ]
    table = cli("team", "list", *base_args(workers, team)).stdout.splitlines()
    assert [line.split(None, 3)[1:] for line in table] == [
        ["idle", "alice-role", "done"],
        ["idle", "alice-role", "done (fork of alice after turn 1)"],
        ["idle", "alice-role", "done (fork of alice after turn 2)"],
    ]

    with served(workers) as base, signed_in(base) as client:
        page = client.get(f"/teams/{team}")
        assert page.status_code == 200
        assert '<td>bob <span class="note">(fork of alice after turn 1)</span></td>' in page.text
        assert "<td>alice</td>" in page.text

    # The source is as it was.
    assert store.turns.memory("alice") == memory
    assert marks(store.conn, store.keys.turns("alice")) == turns
    assert store.get("alice") == source
    store.delete()


def test_grants_stay_the_sources_and_bad_input_is_one_line_exit_2(
    redis_url: str, team: str, tmp_path: Path
) -> None:
    store = TeamStore(redis.Redis.from_url(redis_url, decode_responses=True), team)
    git = McpServer(name="git", command=["mcp-server-git", "--repository", "."])
    assert store.create_new(TeamOptions(grantable_models=["granted-model"]), [git])
    store.spawn(
        "alice",
        role="dev",
        prompt="start",
        model="own-model",
        api_base="http://127.0.0.1:9/v1",
        queue=IDLE_QUEUE,
        plan_mode=True,
        tools=["read_file", "bash"],
        mcp=["git"],
        workspace=tmp_path / "workspace",
        fallbacks=["fallback-model"],
    )
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    # Turn 1 leaves more messages than one page of the copy holds.
    turn_1 = said("assistant", *(f"step {n}" for n in range(2 * MEMORY_PAGE_MESSAGES + 10)))
    assert mark_turn(store, "alice", token, "begin", "test:1") == 1
    for first in range(0, len(turn_1), 50):
        assert store.turns.checkpoint("alice", token, "", turn_1[first : first + 50])
    assert mark_turn(store, "alice", token, "end", "done") == 1
    # Turn 2 runs: it has begun and committed a step, and not ended.
    assert mark_turn(store, "alice", token, "begin", "test:1") == 2
    assert store.turns.checkpoint("alice", token, "", said("user", "second"))
    source = store.get("alice")

    def fork(*args: str) -> Any:
        return cli("team", "fork", "alice", *args, *base_args(redis_url, team))

    refusals = {
        ("--as", "bob", "--at-turn", "2"): (
            1,
            "turn 2 of alice is running; fork after it once it ends, or after one of its "
            "ended turns: 1",
        ),
        ("--as", "bob", "--at-turn", "3"): (
            2,
            f"alice of team {team} has no ended turn 3 in its memory to fork after; its "
            "ended turns: 1",
        ),
        ("--as", "bob", "--model", "wider-model"): (
            2,
            "model 'wider-model' is not granted to a fork of alice; it may use own-model, "
            "fallback-model, granted-model (its own model, its fallbacks and the team file's "
            "[teammates] grantable_models)",
        ),
        ("--as", "alice"): (
            2,
            f"teammate alice exists in team {team}; name the fork something else",
        ),
        ("--as", "Bob!"): (
            2,
            "invalid teammate name 'Bob!': use 1-32 of a-z, 0-9, '_' or '-', starting with a "
            "letter",
        ),
        ("--as", "lead"): (2, "teammate name 'lead' is reserved; choose another name"),
    }
    for args, (code, line) in refusals.items():
        refused = fork(*args)
        assert (refused.exit_code, refused.stdout, refused.stderr) == (
            code,
            "",
            f"teamctl: {line}\n",
        ), args
    for name, line in (
        ("zed", f"unknown teammate 'zed' in team {team}; teammates: alice"),
        ("lead", "the lead cannot be forked (its memory and tools are no teammate's); fork "
         "one of the team's teammates"),
    ):  # fmt: skip
        refused = cli("team", "fork", name, "--as", "bob", *base_args(redis_url, team))
        assert (refused.exit_code, refused.stderr) == (2, f"teamctl: {line}\n")
    # Nothing written: no key of the fork's, no staged copy.
    assert [key for key in store.conn.keys(f"teamctl:team:{{{team}}}:*") if "bob" in key] == []
    assert store.names() == ["alice"]

    # While turn 2 runs, the fork takes memory up to where turn 1 ended: none of turn 2.
    forked = fork("--as", "bob")
    assert forked.exit_code == 0, forked.output
    assert forked.stdout.splitlines()[0] == (
        f"bob is idle in team {team}, forked from alice after turn 1 (model own-model)"
    )
    bob = store.get("bob")
    assert store.turns.memory("bob") == [*said("user", "start"), *turn_1]
    assert grants(bob) == grants(source) and bob.model == source.model
    assert (bob.tools, bob.mcp, bob.fallbacks) == (
        ["read_file", "bash"],
        ["git"],
        ["fallback-model"],
    )
    assert bob.plan_state == "required"  # its own plan needs the lead's approval
    record = store.conn.hmget(store.keys.teammate("bob"), ["memory_seq", "turns", "epoch"])
    assert record == [str(1 + len(turn_1)), "1", "1"]

    # Once turn 2 ended it can be forked after; a fallback of the source or a granted model
    # may be the fork's, and the fork's fallbacks are the source's less its own model.
    assert store.turns.checkpoint("alice", token, "", said("assistant", "two"))
    assert mark_turn(store, "alice", token, "end", "done") == 2
    for name, model, fallbacks in (
        ("carol", "fallback-model", []),
        ("dave", "granted-model", ["fallback-model"]),
    ):
        made = fork("--as", name, "--at-turn", "2", "--model", model)
        assert made.exit_code == 0, made.output
        fork_of = store.get(name)
        assert (fork_of.model, fork_of.fallbacks) == (model, fallbacks)
        assert (fork_of.tools, fork_of.mcp, fork_of.workspace) == (
            source.tools,
            source.mcp,
            source.workspace,
        )
        assert store.turns.memory(name) == store.turns.memory("alice")
    assert store.conn.keys(f"teamctl:team:{{{team}}}:forking:*") == []
    assert store.turns.memory("alice") == [
        *said("user", "start"),
        *turn_1,
        *said("user", "second"),
        *said("assistant", "two"),
    ]

    # A re-spawned fork starts a memory of its own: it is a fork no more.
    store.spawn(
        "bob", role="dev", prompt="anew", model="own-model", api_base=None, queue=IDLE_QUEUE
    )
    assert (store.get("bob").forked_from, store.turns.memory("bob")) == (
        None,
        said("user", "anew"),
    )


@pytest.mark.parametrize("fork_turn", [2, 3])
def test_a_turn_the_memory_caps_dropped_cannot_be_forked_after(
    redis_url: str, team: str, fork_turn: int
) -> None:
    store = TeamStore(redis.Redis.from_url(redis_url, decode_responses=True), team)
    store.create(TeamOptions(memory_max_messages=4))
    store.spawn("alice", role="dev", prompt="start", model="m", api_base=None, queue=IDLE_QUEUE)
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    for number, messages in (
        (1, said("assistant", "one")),
        (2, [*said("user", "u2"), *said("assistant", "two")]),
        (3, [*said("user", "u3"), *said("assistant", "three")]),
    ):
        assert mark_turn(store, "alice", token, "begin", "test:1") == number
        for message in messages:
            assert store.turns.checkpoint("alice", token, "", [message])
        assert mark_turn(store, "alice", token, "end", "done") == number
    # The caps dropped turn 1 whole (its prompt and reply): turns 2 and 3 are left.
    assert store.turns.memory("alice") == [
        *said("user", "u2"), *said("assistant", "two"), *said("user", "u3"),
        *said("assistant", "three"),
    ]  # fmt: skip
    args = base_args(redis_url, team)
    dropped = cli("team", "fork", "alice", "--as", "bob", "--at-turn", "1", *args)
    assert (dropped.exit_code, dropped.stderr) == (
        2,
        f"teamctl: alice of team {team} has no ended turn 1 in its memory to fork after; its "
        "ended turns: 2-3\n",
    )
    forked = cli("team", "fork", "alice", "--as", "bob", "--at-turn", str(fork_turn), *args)
    assert forked.exit_code == 0, forked.output
    kept = 2 * (fork_turn - 1)
    assert store.turns.memory("bob") == store.turns.memory("alice")[:kept]
    # Its transcript reads as alice's turns up to that one.
    shown = cli("team", "transcript", "bob", *args)
    turns = [
        cli("team", "transcript", "alice", "--turn", str(n), *args).stdout
        for n in range(2, fork_turn + 1)
    ]
    assert (shown.exit_code, shown.stdout) == (0, "".join(turns))
