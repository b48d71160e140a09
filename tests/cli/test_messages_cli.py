"""`teamctl messages`: listing, filters, JSON, and --follow ending with the run or on Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

import pytest
import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.bus import MessageBus
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.retention import expire_run
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.team_file import Member

from tests.support.cli import shown_at
from tests.support.runs import coordinator_store
from tests.support.waiting import wait_until

MEMBERS = ["m1", "m2", "m3"]
FOLLOW_DEADLINE_S = 15


def store_run(conn: redis.Redis, run_id: str) -> tuple[RunStore, MessageBus]:
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
    store = coordinator_store(conn, run_id)
    store.set_status("running")
    return store, MessageBus(conn, RunKeys(run_id))


def converse(bus: MessageBus) -> None:
    bus.publish("system", "m1", "task.assigned", "t1", "Collect facts")
    bus.send("m1", "m2", None, "t1", "need your numbers")
    bus.broadcast("m2", None, None, "numbers are in")
    bus.publish("m1", "lead", "task.result", "t1", "facts")


def messages(redis_url: str, run_id: str, *options: str) -> Result:
    return CliRunner().invoke(main, ["messages", run_id, "--redis-url", redis_url, *options])


def blocked_readers(conn: redis.Redis) -> int:
    """Clients of this test's db waiting in XREAD BLOCK: a follower that is tailing the bus."""
    db = str(conn.connection_pool.connection_kwargs["db"])
    return sum(
        1
        for c in conn.client_list()
        if c["cmd"] == "xread" and "b" in c["flags"] and str(c["db"]) == db
    )


def test_lists_every_message_in_order(conn: redis.Redis, redis_url: str, run_id: str) -> None:
    converse(store_run(conn, run_id)[1])
    result = messages(redis_url, run_id)
    assert result.exit_code == 0, result.output
    at = [shown_at(m.created_at) for m in MessageBus(conn, RunKeys(run_id)).messages()]
    assert result.output.splitlines() == [
        f"{at[0]} [task.assigned] (t1) system -> m1: Collect facts",
        f"{at[1]} [peer.message] (t1) m1 -> m2: need your numbers",
        f"{at[2]} [peer.broadcast] m2 -> *: numbers are in",
        f"{at[3]} [task.result] (t1) m1 -> lead: facts",
    ]


def test_a_members_escape_sequences_never_reach_the_terminal(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    """A member writes the content: a colour, a bell or a title change must not act on the
    terminal that lists it; its lines stay lines, indented under the first."""
    _, bus = store_run(conn, run_id)
    sent = bus.send("m1", "m2", None, None, "\x1b[31mred\x1b[0m\x07 and \x1b]0;owned\x07\nnext")

    result = messages(redis_url, run_id)

    assert result.exit_code == 0, result.output
    assert sent is not None
    assert result.output.splitlines() == [
        f"{shown_at(sent.created_at)} [peer.message] m1 -> m2: red  and",
        "    next",
    ]


def test_filters_by_member_and_type_and_prints_json(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    converse(store_run(conn, run_id)[1])
    m3 = messages(redis_url, run_id, "--member", "M3", "--json")
    assert [json.loads(line)["content"] for line in m3.output.splitlines()] == ["numbers are in"]
    first = json.loads(m3.output.splitlines()[0])
    assert set(first) == {"id", "from", "to", "type", "task_id", "content", "created_at"}
    assert (first["from"], first["to"], first["task_id"]) == ("m2", "*", None)

    m2 = messages(redis_url, run_id, "--member", "m2")
    assert [line.rsplit(": ", 1)[1] for line in m2.output.splitlines()] == ["need your numbers"]
    lead = messages(redis_url, run_id, "--member", "lead", "--type", "task.result", "--json")
    assert [json.loads(line)["content"] for line in lead.output.splitlines()] == ["facts"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--member", "ghost"],
            "--member 'ghost' is not in this run; use one of: m1, m2, m3, lead",
        ),
        (["--member", "../m1"], "is not in this run"),
    ],
)
def test_a_bad_member_is_a_usage_error(
    conn: redis.Redis, redis_url: str, run_id: str, args: list[str], says: str
) -> None:
    store_run(conn, run_id)
    result = messages(redis_url, run_id, *args)
    assert result.exit_code == 2 and says in result.stderr


def test_an_unknown_run_is_a_usage_error(redis_url: str) -> None:
    result = messages(redis_url, "no-such-run")
    assert result.exit_code == 2 and "no run no-such-run" in result.stderr


def test_follow_prints_new_messages_and_ends_when_the_run_ends(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    store, bus = store_run(conn, run_id)
    bus.send("m1", "m2", None, None, "before following")
    outcome: list[Result] = []
    follower = threading.Thread(
        daemon=True,
        target=lambda: outcome.append(
            messages(redis_url, run_id, "--follow", "--type", "peer.message")
        ),
    )
    follower.start()

    wait_until(lambda: blocked_readers(conn), 10, message="the follower to block in XREAD")
    bus.send("m2", "m3", None, None, "while following")
    bus.broadcast("m3", None, None, "not a peer.message")
    store.finish(
        RunEnd("completed", 3600, output="done", announce="run.complete", announce_text="done")
    )
    follower.join(FOLLOW_DEADLINE_S)

    assert not follower.is_alive(), "--follow did not end with the run"
    assert outcome[0].exit_code == 0, outcome[0].output
    assert [line.rsplit(": ", 1)[1] for line in outcome[0].output.splitlines()] == [
        "before following",
        "while following",
    ]


def test_follow_ends_when_the_run_expires_under_it(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    _, bus = store_run(conn, run_id)  # left "running", as by a coordinator that died
    bus.send("m1", "m2", None, None, "last words")
    outcome: list[Result] = []
    follower = threading.Thread(
        daemon=True, target=lambda: outcome.append(messages(redis_url, run_id, "--follow"))
    )
    follower.start()
    wait_until(lambda: blocked_readers(conn), 10, message="the follower to block in XREAD")
    expire_run(conn, run_id, 1)
    follower.join(FOLLOW_DEADLINE_S)
    assert not follower.is_alive(), "--follow did not end when the run expired"
    assert outcome[0].exit_code == 0 and outcome[0].output.endswith("m1 -> m2: last words\n")


def test_follow_on_a_finished_run_prints_everything_and_returns(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    store, bus = store_run(conn, run_id)
    converse(bus)
    store.finish(RunEnd("failed", 3600, error="boom"))
    result = messages(redis_url, run_id, "--follow")
    assert result.exit_code == 0 and len(result.output.splitlines()) == 4


def test_follow_stops_quietly_on_ctrl_c(conn: redis.Redis, redis_url: str, run_id: str) -> None:
    _, bus = store_run(conn, run_id)
    converse(bus)
    teamctl = [sys.executable, "-c", "from teamctl.coordinator.cli import main; main()"]
    process = subprocess.Popen(
        [*teamctl, "messages", run_id, "--redis-url", redis_url, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: blocked_readers(conn), 20, message="the follower to block in XREAD")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=FOLLOW_DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert process.returncode == 0, err
    assert len(out.splitlines()) == 4 and "Traceback" not in err
