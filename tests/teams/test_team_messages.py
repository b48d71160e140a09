"""`teamctl team messages`: the team's bus in order, filtered by recipient and type, and --follow
tailing it until the team is deleted. Real Redis; the teammates' turns queue where no worker
listens, so only the messages sent here are on the bus."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redis
from teamctl.shared.teams.team_store import TeamStore

from tests.support.cli import shown_at
from tests.support.teams import cli


def quiet_team(conn: redis.Redis, team: str) -> TeamStore:
    store = TeamStore(conn, team)
    for name in ("alice", "bob"):
        store.spawn(name, role="r", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    return store


def test_messages_lists_the_bus_and_filters_by_member_and_type(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = quiet_team(conn, team)
    store.messages.send("lead", "alice", "to alice")
    store.messages.send("alice", "bob", "to bob")
    store.messages.broadcast("lead", "to all")

    every = cli("team", "messages", "-t", team, "--redis-url", redis_url, "--json")
    assert every.exit_code == 0
    lines = [json.loads(line) for line in every.output.splitlines()]
    assert [(m["from"], m["to"], m["content"]) for m in lines] == [
        ("lead", "alice", "to alice"),
        ("alice", "bob", "to bob"),
        ("lead", "*", "to all"),
    ]

    bob = cli("team", "messages", "-t", team, "--redis-url", redis_url, "--member", "bob")
    at = [shown_at(m["created_at"]) for m in lines]
    assert bob.output.splitlines() == [
        f"{at[1]} [peer.message] alice -> bob: to bob",
        f"{at[2]} [peer.broadcast] lead -> *: to all",
    ]
    broadcasts = cli(
        "team", "messages", "-t", team, "--redis-url", redis_url, "--type", "peer.broadcast"
    )
    assert [line.rsplit(": ", 1)[1] for line in broadcasts.output.splitlines()] == ["to all"]

    unknown = cli("team", "messages", "-t", team, "--redis-url", redis_url, "--member", "carol")
    assert unknown.exit_code == 2
    assert "unknown teammate 'carol'" in unknown.output
    assert "alice, bob" in unknown.output


def test_follow_prints_new_messages_until_the_team_is_deleted(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = quiet_team(conn, team)
    store.messages.send("lead", "alice", "before")
    teamctl = str(Path(sys.executable).with_name("teamctl"))
    follower = subprocess.Popen(
        [teamctl, "team", "messages", "-t", team, "--redis-url", redis_url, "--follow"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline().endswith(": before\n")
        store.messages.send("lead", "bob", "during")
        assert follower.stdout.readline().endswith(": during\n")
        # Deleting the team (its turns never ran, so they are "working") ends the follow.
        store.delete(force=True)
        assert follower.wait(30) == 0
        assert follower.stdout.read() == ""
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
