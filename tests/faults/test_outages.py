"""Redis restarts, outages and a coordinator cut off from Redis: every task completes once, a
long outage ends the coordinator with one line and leaves the run resumable, and a coordinator
that lost its lease writes nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL
from tests.support.faults import RestartableRedis, TcpProxy
from tests.support.llm import Held, ScriptedLLM, release_when
from tests.support.replies import member_answer
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, timing_options
from tests.support.waiting import wait_until

PLAN = [{"id": "a", "memberId": "m1", "task": "A"}, {"id": "b", "memberId": "m2", "task": "B"}]
EXIT_DEADLINE_S = 180


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    """A redis-server of this test's own (appendonly on), so restarting it disturbs nobody."""
    with RestartableRedis(tmp_path / "redis-data") as server:
        yield server


@pytest.fixture
def own_workers(own_redis: RestartableRedis, tmp_path: Path) -> Iterator[LocalWorkers]:
    """Two preloaded rq workers on the test's own Redis."""
    group = LocalWorkers(own_redis.url, ["members"], 2, tmp_path / "worker-logs")
    group.start()
    client = redis.Redis.from_url(own_redis.url)
    wait_until(lambda: len(client.smembers("rq:workers")) >= 2, 60, message="2 rq workers")
    yield group
    group.stop()


def start_run(
    llm: ScriptedLLM, redis_url: str, run_id: str, team: Path, *extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            redis_url,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=EXIT_DEADLINE_S)
    finally:
        stop_process(process)  # type: ignore[arg-type]
    return process.returncode, out, err


def models_for(
    llm: ScriptedLLM, run_id: str, *, member_latency_s: float, synth: list[Any] | None = None
) -> dict[str, str]:
    return {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)]),
        "member": llm.script(f"member-{run_id}", handler=member_answer, latency_s=member_latency_s),
        "synth": llm.script(f"synth-{run_id}", ["the answer"] if synth is None else synth),
    }


def in_progress(board: TaskBoard, *task_ids: str) -> bool:
    try:
        return all((t := board.get(i)) and t.status is TaskStatus.IN_PROGRESS for i in task_ids)
    except redis.ConnectionError:
        return False


def message_types(conn: redis.Redis, run_id: str) -> list[str]:
    return [m.type for m in MessageBus(conn, RunKeys(run_id)).messages()]


@pytest.mark.realistic
@pytest.mark.parametrize("crash", [False, True], ids=["shutdown", "sigkill"])
def test_redis_restart_mid_run_at_default_ttls_completes_every_task_once(
    llm: ScriptedLLM,
    own_redis: RestartableRedis,
    own_workers: LocalWorkers,
    run_id: str,
    tmp_path: Path,
    crash: bool,
) -> None:
    # The members' calls outlast the restart (stop, down, start) at any scale.
    models = models_for(llm, run_id, member_latency_s=scaled(6, floor_s=3))
    team = team_file(tmp_path / "team.toml", models, options=timing_options())
    conn = redis.Redis.from_url(own_redis.url, decode_responses=True)
    coordinator = start_run(llm, own_redis.url, run_id, team)
    wait_until(
        lambda: len(llm.requests[f"member-{run_id}"]) == 2,
        90,
        message="both members waiting on their model calls",
    )

    # While both members wait on their model calls; a SIGKILLed Redis loses nothing either,
    # every write having been fsynced to its AOF.
    own_redis.restart(down_s=scaled(2), crash=crash)

    code, out, err = finish(coordinator)
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "completed" and result["output"] == "the answer"
    assert [(s["task_id"], s["status"], s["attempts"]) for s in result["task_states"]] == [
        ("a", "completed", 1),
        ("b", "completed", 1),
    ]
    types = message_types(conn, run_id)
    assert types.count("task.result") == 2 and types.count("run.complete") == 1
    assert all(w.poll() is None for w in own_workers.processes), "a worker died in the restart"


def test_outage_past_redis_outage_s_stops_with_one_line_then_resume_finishes(
    llm: ScriptedLLM,
    own_redis: RestartableRedis,
    own_workers: LocalWorkers,
    run_id: str,
    tmp_path: Path,
) -> None:
    # The members think for 20 s: Redis is back long before they write their results.
    team = team_file(
        tmp_path / "team.toml",
        models_for(llm, run_id, member_latency_s=20),
        options={"redis_outage_s": 2},
    )
    conn = redis.Redis.from_url(own_redis.url, decode_responses=True)
    coordinator = start_run(llm, own_redis.url, run_id, team)
    wait_until(
        lambda: len(llm.requests[f"member-{run_id}"]) == 2,
        90,
        message="both members waiting on their model calls",
    )

    own_redis.stop()
    code, out, err = finish(coordinator)
    own_redis.start()

    assert code == 1 and out == ""
    lines = [line for line in err.splitlines() if not line.startswith("teamctl: run ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "redis_outage_s=2s" in lines[0] and f"teamctl resume {run_id}" in lines[0]
    assert RunStore(conn, RunKeys(run_id)).state().status == "running"  # left resumable
    # The dead coordinator could not release its lease; it expires within lease_ttl_s.
    wait_until(lambda: not conn.exists(RunKeys(run_id).lease), 30, message="the lease to expire")

    resumed = CliRunner().invoke(
        main, ["resume", run_id, "--redis-url", own_redis.url, "--workers", "0", "--json"]
    )
    assert resumed.exit_code == 0, resumed.output
    result = json.loads(resumed.stdout)
    assert result["status"] == "completed" and result["output"] == "the answer"
    assert [(s["task_id"], s["attempts"]) for s in result["task_states"]] == [("a", 1), ("b", 1)]
    assert message_types(conn, run_id).count("run.complete") == 1


def test_a_cut_off_coordinator_never_overwrites_the_run_resumed_elsewhere(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    host, port = workers.split("//")[1].split("/")[0].split(":")
    # The synthesis (a worker's job, the workers are not behind the proxy) outlasts the cut;
    # B, the resumed coordinator, waits for that same call instead of asking again: it is
    # answered once B holds the lease (A, cut off, cannot take it back).
    synthesis = Held("the one synthesis")
    models = models_for(llm, run_id, member_latency_s=0, synth=[synthesis])
    team = team_file(tmp_path / "team.toml", models, options={"lease_ttl_s": 2})
    conn = redis.Redis.from_url(workers, decode_responses=True)
    keys = RunKeys(run_id)
    with TcpProxy(host, int(port)) as proxy:
        a = start_run(llm, proxy.url(), run_id, team)
        wait_until(
            lambda: len(llm.requests[f"synth-{run_id}"]) == 1, 90, message="A's synthesizer call"
        )
        proxy.cut()
        wait_until(lambda: not conn.exists(keys.lease), 30, message="A's lease to expire")

        release_when(synthesis, lambda: conn.exists(keys.lease))
        b = CliRunner().invoke(
            main, ["resume", run_id, "--redis-url", workers, "--workers", "0", "--json"]
        )
        assert b.exit_code == 0, b.output
        proxy.restore()
        code, _, err = finish(a)

    assert code == 1 and f"run {run_id} was already ended by another coordinator" in err, err
    state = RunStore(conn, RunKeys(run_id)).state()
    assert (state.status, state.output) == ("completed", "the one synthesis")
    assert message_types(conn, run_id).count("run.complete") == 1
    # Planner, two members and the one synthesis, counted once (by B).
    assert len(llm.requests[f"synth-{run_id}"]) == 1
    assert RunStore(conn, RunKeys(run_id)).usage().prompt_tokens == 4 * 11
    assert conn.ttl(keys.state) > 0  # B ended it, so B set its expiry


def test_a_blackholed_redis_surfaces_as_the_outage_error_not_a_hang(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """Redis stops answering but keeps the connection open (a host that froze, a dropped
    route): socket timeouts turn that into the same one-line outage error."""
    host, port = workers.split("//")[1].split("/")[0].split(":")
    team = team_file(
        tmp_path / "team.toml",
        models_for(llm, run_id, member_latency_s=10, synth=[]),  # never reached
        options={"redis_outage_s": 2},
    )
    conn = redis.Redis.from_url(workers, decode_responses=True)
    with TcpProxy(host, int(port)) as proxy:
        coordinator = start_run(llm, proxy.url(), run_id, team)
        wait_until(
            lambda: in_progress(TaskBoard(conn, RunKeys(run_id)), "a", "b"),
            90,
            message="both tasks in progress",
        )
        proxy.blackhole()
        code, out, err = finish(coordinator)
    assert code == 1 and out == "" and "Traceback" not in err, err
    assert "Redis was unreachable for more than redis_outage_s=2s" in err
    wait_until(
        lambda: TaskBoard(conn, RunKeys(run_id)).counts().get(TaskStatus.COMPLETED) == 2,
        60,
        message="the members (not behind the proxy) to finish their tasks",
    )


CUT_OFF_TTL_S = 12.0
"""heartbeat_ttl_s for the short cut-off: long enough that a third of it is a real outage."""
ONE_TASK = [{"id": "a", "memberId": "m1", "task": "A"}]


def test_a_worker_cut_off_for_less_than_the_heartbeat_ttl_keeps_its_claim(
    llm: ScriptedLLM, own_redis: RestartableRedis, run_id: str, tmp_path: Path
) -> None:
    """A worker's only link to Redis goes down for a third of heartbeat_ttl_s while its member
    waits on a model call: the claim outlives the outage, so the task completes on its first
    attempt, the write is accepted and announced once."""
    conn = redis.Redis.from_url(own_redis.url, decode_responses=True)
    heartbeat = RunKeys(run_id).heartbeat("a")
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(ONE_TASK)]),
        # The reply comes a third of the TTL after the link is back (and the heartbeat).
        "member": llm.script(
            f"member-{run_id}", ["from the cut-off worker"], latency_s=CUT_OFF_TTL_S * 2 / 3
        ),
        "synth": llm.script(f"synth-{run_id}", ["the answer"]),
    }
    team = team_file(tmp_path / "team.toml", models, options={"heartbeat_ttl_s": CUT_OFF_TTL_S})
    with TcpProxy("127.0.0.1", own_redis.port) as proxy:
        worker = LocalWorkers(proxy.url(), ["members"], 1, tmp_path / "worker-logs")
        worker.start()  # while it starts, the coordinator plans; its job waits in the queue
        coordinator = None
        try:
            coordinator = start_run(llm, own_redis.url, run_id, team)
            wait_until(
                lambda: len(llm.requests[f"member-{run_id}"]) == 1,
                90,
                message="the member waiting on its model call",
            )

            proxy.cut()
            left_at_cut_ms = conn.pttl(heartbeat)
            with pytest.raises(redis.ConnectionError):
                redis.Redis.from_url(proxy.url(), socket_connect_timeout=1).ping()
            # The outage lasts until it has eaten a third of the TTL (no refresh gets through).
            wait_until(
                lambda: conn.pttl(heartbeat) <= left_at_cut_ms - CUT_OFF_TTL_S * 1000 / 3,
                CUT_OFF_TTL_S,
                message="a third of the heartbeat TTL to pass",
            )
            left_before_restore_ms = conn.pttl(heartbeat)  # read while no refresh can land
            proxy.restore()
            wait_until(
                lambda: conn.pttl(heartbeat) > left_before_restore_ms,
                CUT_OFF_TTL_S / 2,
                message="the worker's heartbeat to come back through the link",
            )

            code, out, err = finish(coordinator)
            assert all(w.poll() is None for w in worker.processes), "the worker died in the cut"
        finally:
            if coordinator is not None:
                stop_process(coordinator)  # type: ignore[arg-type]
            worker.stop()

    assert code == 0, err
    result = json.loads(out)
    assert (result["status"], result["output"]) == ("completed", "the answer")
    assert [(s["task_id"], s["status"], s["attempts"]) for s in result["task_states"]] == [
        ("a", "completed", 1)
    ]
    task = TaskBoard(conn, RunKeys(run_id)).get("a")
    assert (task.output, task.stale_writes) == ("from the cut-off worker", 0)
    types = message_types(conn, run_id)
    assert types.count("task.result") == 1 and types.count("run.complete") == 1
