"""An ended run's keys expire after the retention period; late keys inherit the expiry."""

from __future__ import annotations

import time

import pytest
import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RUNS_INDEX, RunKeys
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.retention import expire_run, forget_expired_runs
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member

from tests.support.waiting import assert_ttl_as_set, wait_until

MEMBERS = ["m1", "m2", "m3"]


def make_run(conn: redis.Redis, run_id: str) -> MessageBus:
    """A stored run spec plus some bus traffic, as a finished run leaves them."""
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective="o",
        members=[Member(id=m) for m in MEMBERS],
        options=RunOptions(),
        models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
        workspace_dir="/tmp",
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    bus = RunHandle(conn, run_id, spec=spec).bus
    bus.send("m1", "m2", None, None, "hello")
    bus.read_unread("m2")
    return bus


def ttls(conn: redis.Redis, run_id: str) -> dict[str, int]:
    return {k: conn.ttl(k) for k in conn.scan_iter(match=RunKeys(run_id).all_patterns())}


def made_by_make_run(run_id: str) -> list[str]:
    """The keys make_run leaves: the stored run, and the bus after one message read by m2."""
    keys = RunKeys(run_id)
    return sorted(
        [
            keys.spec,
            keys.state,
            keys.roster,
            keys.roster_ver,
            keys.bus,
            keys.bus_seq,
            keys.inbox("m2"),
            keys.read_offsets,
        ]
    )


def test_every_key_of_the_run_and_only_it_gets_the_retention(conn: redis.Redis) -> None:
    make_run(conn, "ended")
    make_run(conn, "live")
    expired_at = time.monotonic()
    assert expire_run(conn, "ended", 600) == 8
    assert sorted(ttls(conn, "ended")) == made_by_make_run("ended")

    for key in made_by_make_run("ended"):
        assert_ttl_as_set(conn, key, 600, expired_at)
    assert all(ttl == -1 for ttl in ttls(conn, "live").values())
    assert conn.ttl(RUNS_INDEX) == -1


def test_keys_created_by_a_late_message_expire_with_the_bus(conn: redis.Redis) -> None:
    bus = make_run(conn, "late")
    expired_at = time.monotonic()
    expire_run(conn, "late", 600)
    bus.send("m2", "m3", None, None, "after the end")  # m3's inbox did not exist yet
    assert contents_of(bus.read_unread("m3")) == ["after the end"]

    keys = RunKeys("late")
    assert sorted(ttls(conn, "late")) == sorted([*made_by_make_run("late"), keys.inbox("m3")])
    for key in ttls(conn, "late"):
        assert_ttl_as_set(conn, key, 600, expired_at)


def test_expired_runs_leave_the_runs_index(conn: redis.Redis) -> None:
    make_run(conn, "short")
    make_run(conn, "kept")
    expire_run(conn, "short", 1)
    wait_until(lambda: not conn.exists(RunKeys("short").spec), 5, message="the run to expire")

    assert forget_expired_runs(conn) == ["short"]
    assert conn.zrange(RUNS_INDEX, 0, -1) == ["kept"]
    assert ttls(conn, "short") == {}


def test_a_retention_below_one_second_is_refused(conn: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="at least 1 second"):
        expire_run(conn, "r", 0)


def contents_of(messages: list) -> list[str]:
    return [m.content for m in messages]


def test_keys_that_expire_sooner_keep_their_ttl(conn: redis.Redis) -> None:
    """A live claim's heartbeat must not look alive for the whole retention period."""
    make_run(conn, "hb")
    heartbeat = RunKeys("hb").heartbeat("t1")
    beat_at = time.monotonic()
    conn.set(heartbeat, "1", px=30_000)
    expired_at = time.monotonic()
    expire_run(conn, "hb", 3600)
    assert_ttl_as_set(conn, heartbeat, 30, beat_at)
    assert_ttl_as_set(conn, RunKeys("hb").bus, 3600, expired_at)
    assert_ttl_as_set(conn, RunKeys("hb").spec, 3600, expired_at)


def test_a_runs_bus_takes_its_cap_and_limits_from_the_run_options(conn: redis.Redis) -> None:
    spec = RunSpec(
        run_id="capped",
        team_id="t",
        objective="o",
        members=[Member(id=m) for m in MEMBERS],
        options=RunOptions(bus_max_messages=5, max_message_bytes=10),
        models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
        workspace_dir="/tmp",
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(spec.run_id)).create(spec)
    bus = RunHandle(conn, spec.run_id).bus
    for n in range(20):
        bus.publish("system", "lead", "run.note", None, f"n{n}")
    # Past the cap (a tenth of 5 is no slack) every message cuts the bus back to the last 5.
    assert [m.content for m in bus.messages()] == [f"n{n}" for n in range(15, 20)]
    with pytest.raises(ConfigError, match="limit is 10 bytes"):
        bus.send("m1", "m2", None, None, "x" * 11)


def test_a_release_after_the_run_ended_does_not_leave_keys_without_ttl(conn: redis.Redis) -> None:
    """A worker that gives its task back after the run ended recreates `ready`: it must expire."""
    make_run(conn, "late")
    board = TaskBoard(conn, RunKeys("late"))
    board.create([TaskSpec(id="a", task="A")])
    token = board.claim("a", "m1", "w:1", 30)
    expired_at = time.monotonic()
    expire_run(conn, "late", 3600)
    assert not conn.exists(RunKeys("late").ready)  # emptied by the claim, so deleted
    board.release("a", token)
    assert_ttl_as_set(conn, RunKeys("late").ready, 3600, expired_at)  # the task's, inherited
    board.claim("a", "m1", "w:2", 30)
    assert_ttl_as_set(conn, RunKeys("late").running, 3600, expired_at)
