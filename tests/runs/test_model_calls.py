"""The coordinator's model calls run as jobs on workers: the coordinator never imports litellm,
waits (and says so) when no worker listens, survives the worker dying mid-call, and a resumed
coordinator adopts the call its predecessor started instead of asking the model again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.model_call_records import (
    ModelCallOutcome,
    ModelCallRecords,
    ModelCallRequest,
)
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunStore

from tests.support.cli import TEAMCTL
from tests.support.llm import Held, ScriptedLLM, Slow, release_when
from tests.support.replies import member_answer
from tests.support.timescale import scaled
from tests.support.waiting import wait_until

PLAN = [{"id": "a", "memberId": "m1", "task": "A"}]
TTL_S = scaled(30, floor_s=1.5)


def team_toml(
    path: Path,
    llm: ScriptedLLM,
    run_id: str,
    *,
    call_queue: str,
    member_queue: str = "members",
    planner: list[Any] | None = None,
    synth: list[Any] | None = None,
    options: dict[str, Any] | None = None,
) -> Path:
    """One member m1; planner and synthesizer on `call_queue`."""
    planner_model = llm.script(f"plan-{run_id}", [json.dumps(PLAN)] if planner is None else planner)
    synth_model = llm.script(f"s-{run_id}", ["the answer"] if synth is None else synth)
    lines = [
        f'model = "{llm.script(f"m-{run_id}", handler=member_answer)}"',
        f'planner = {{ model = "{planner_model}", queue = "{call_queue}" }}',
        f'synthesizer = {{ model = "{synth_model}", queue = "{call_queue}" }}',
        "[[members]]",
        'id = "m1"',
        f'queue = "{member_queue}"',
        "[options]",
        *(f"{k} = {json.dumps(v)}" for k, v in (options or {}).items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def start_run(
    llm: ScriptedLLM, url: str, run_id: str, team: Path, stderr: Path
) -> subprocess.Popen[str]:
    with stderr.open("w") as err:
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
                url,
                "--workers",
                "0",
                "--run-id",
                run_id,
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


@pytest.fixture
def queue() -> str:
    return f"calls-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def two_workers(redis_server: str, queue: str, tmp_path: Path) -> Iterator[LocalWorkers]:
    """Two preloaded workers of this test's own, on its own queue."""
    group = LocalWorkers(redis_server, [queue], 2, tmp_path / "worker-logs")
    group.start()
    client = redis.Redis.from_url(redis_server)
    try:
        wait_until(
            lambda: len(client.smembers(f"rq:workers:{queue}")) == 2,
            60,
            message="2 workers on the test queue",
        )
        yield group
    finally:
        group.stop()


def test_a_superseded_attempt_can_neither_begin_beat_nor_answer(conn: redis.Redis) -> None:
    calls = ModelCallRecords(conn, RunKeys("r1"))
    request = ModelCallRequest(model="m", messages=[{"role": "user", "content": "plan"}])
    first = calls.start("planner", request)
    assert calls.begin("planner", first, "host:1", 5) == request
    assert calls.begin("planner", first, "host:2", 5) is None  # taken once only
    second = calls.start("planner", request)  # the coordinator gave up on the first

    late = ModelCallOutcome(reply=ModelReply(content="late"), worker="host:1")
    assert not calls.beat("planner", first, 5)
    assert not calls.finish("planner", first, late)
    assert calls.begin("planner", second, "host:3", 5) == request
    assert calls.finish("planner", second, ModelCallOutcome(reply=ModelReply(content="on time")))
    assert not calls.finish("planner", second, late)  # answered once
    # A retry racing the answer (its job already gone) keeps the answer.
    assert calls.start("planner", request, replacing=second) == 0
    assert calls.start("planner", request, replacing=first) == 0
    view = calls.view("planner")
    assert (view.attempt, view.began, view.beating) == (second, True, False)
    assert view.outcome is not None and view.outcome.reply == ModelReply(content="on time")


def test_the_coordinator_imports_no_litellm_and_its_calls_run_on_workers(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    team = team_toml(tmp_path / "team.toml", llm, run_id, call_queue="members")
    args = [
        "run",
        "x",
        "--team",
        str(team),
        "--api-base",
        llm.api_base,
        "--redis-url",
        workers,
        "--workers",
        "0",
        "--run-id",
        run_id,
    ]
    probe = (
        "import sys\nfrom teamctl.coordinator.cli import main\n"
        f"try:\n    main({args!r})\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code, 'litellm' in sys.modules, file=sys.stderr)\n"
    )
    coordinator = subprocess.Popen(
        [sys.executable, "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = coordinator.communicate(timeout=120)

    assert out.strip() == "the answer", err
    assert err.strip().splitlines()[-1] == "exit 0 False", err
    conn = redis.Redis.from_url(workers, decode_responses=True)
    keys = RunKeys(run_id)
    for call in ("planner", "synthesizer"):
        worker = conn.hget(keys.model_call(call), "worker") or ""
        host, pid = worker.rsplit(":", 1)
        assert host == os.uname().nodename and int(pid) != coordinator.pid  # a worker's
    assert len(llm.requests[f"plan-{run_id}"]) == 1 and len(llm.requests[f"s-{run_id}"]) == 1


def test_with_no_worker_on_the_planner_queue_the_run_says_so_and_waits_for_one(
    llm: ScriptedLLM, redis_server: str, workers: str, queue: str, run_id: str, tmp_path: Path
) -> None:
    team = team_toml(tmp_path / "team.toml", llm, run_id, call_queue=queue)
    stderr = tmp_path / "stderr"
    coordinator = start_run(llm, workers, run_id, team, stderr)
    late = LocalWorkers(redis_server, [queue], 1, tmp_path / "late-logs")
    try:
        wait_until(
            lambda: f"no worker listens on queue {queue}" in stderr.read_text(),
            60,
            message="the no-worker hint",
        )
        assert f"teamctl workers start --queue {queue}" in stderr.read_text()
        assert coordinator.poll() is None and llm.requests[f"plan-{run_id}"] == []
        late.start()
        out, _ = coordinator.communicate(timeout=120)
    finally:
        late.stop()
        stop_process(coordinator)  # type: ignore[arg-type]

    assert coordinator.returncode == 0, stderr.read_text()
    assert json.loads(out)["output"] == "the answer"
    assert stderr.read_text().count("no worker listens") == 1


def test_a_cancel_while_the_planner_call_waits_ends_the_run_cancelled(
    llm: ScriptedLLM, workers: str, queue: str, run_id: str, tmp_path: Path
) -> None:
    team = team_toml(tmp_path / "team.toml", llm, run_id, call_queue=queue, planner=[], synth=[])
    stderr = tmp_path / "stderr"
    coordinator = start_run(llm, workers, run_id, team, stderr)
    store = RunStore(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
    try:
        wait_until(
            lambda: (
                store.exists()
                and redis.Redis.from_url(workers).exists(RunKeys(run_id).model_call("planner"))
            ),
            60,
            message="the planner call queued",
        )
        cancelled = CliRunner().invoke(main, ["cancel", run_id, "--redis-url", workers])
        assert cancelled.exit_code == 0, cancelled.output
        out, _ = coordinator.communicate(timeout=60)
    finally:
        stop_process(coordinator)  # type: ignore[arg-type]

    assert coordinator.returncode == 1, stderr.read_text()
    result = json.loads(out)
    assert (result["status"], result["plan"]["tasks"]) == (RunStatus.CANCELLED, [])
    assert llm.requests[f"plan-{run_id}"] == []
    # The queued job's attempt was fenced: a worker that comes up later makes no paid call.
    assert (
        ModelCallRecords(redis.Redis.from_url(workers), RunKeys(run_id)).begin(
            "planner", 1, "host:1", 5
        )
        is None
    )


def test_a_worker_killed_during_the_planner_call_is_replaced_and_the_plan_made_once(
    llm: ScriptedLLM,
    redis_server: str,
    queue: str,
    run_id: str,
    two_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    plan = json.dumps(PLAN)  # the first answer outlasts the kill: its worker never gets it
    team = team_toml(
        tmp_path / "team.toml",
        llm,
        run_id,
        call_queue=queue,
        member_queue=queue,
        planner=[Slow(plan, 10), plan],
        options={"heartbeat_ttl_s": TTL_S},
    )
    planner_calls = llm.requests[f"plan-{run_id}"]
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    coordinator = start_run(llm, redis_server, run_id, team, tmp_path / "stderr")
    try:
        wait_until(lambda: len(planner_calls) == 1, 60, message="the first planner call")
        horse = int(
            (conn.hget(RunKeys(run_id).model_call("planner"), "worker") or "").rsplit(":", 1)[1]
        )
        parent = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert parent in [p.pid for p in two_workers.processes]
        os.kill(parent, signal.SIGKILL)
        os.kill(horse, signal.SIGKILL)
        out, _ = coordinator.communicate(timeout=60 + 4 * TTL_S)
    finally:
        stop_process(coordinator)  # type: ignore[arg-type]

    assert coordinator.returncode == 0, (tmp_path / "stderr").read_text()
    result = json.loads(out)
    assert (result["status"], [t["id"] for t in result["plan"]["tasks"]]) == ("completed", ["a"])
    assert len(planner_calls) == 2
    assert "stopped beating; asking another" in (tmp_path / "stderr").read_text()
    assert conn.hget(RunKeys(run_id).model_call("planner"), "attempt") == "2"


def test_a_resumed_coordinator_adopts_the_planner_call_in_flight(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    lease_ttl_s = scaled(15, floor_s=1.0)
    plan = Held(json.dumps(PLAN))  # answered once the resumed coordinator holds the lease
    team = team_toml(
        tmp_path / "team.toml",
        llm,
        run_id,
        call_queue="members",
        planner=[plan],
        options={"lease_ttl_s": lease_ttl_s},
    )
    planner_calls = llm.requests[f"plan-{run_id}"]
    calls = ModelCallRecords(redis.Redis.from_url(workers), RunKeys(run_id))
    conn = redis.Redis.from_url(workers, decode_responses=True)
    first = start_run(llm, workers, run_id, team, tmp_path / "first-stderr")
    try:
        wait_until(lambda: len(planner_calls) == 1, 60, message="the first planner call")
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    wait_until(
        lambda: not conn.exists(RunKeys(run_id).lease),
        10 + lease_ttl_s,
        message="the dead coordinator's lease to expire",
    )
    assert calls.view("planner").outcome is None  # still in flight on its worker

    release_when(plan, lambda: conn.exists(RunKeys(run_id).lease))
    resumed = CliRunner().invoke(
        main, ["resume", run_id, "--redis-url", workers, "--workers", "0", "--json"]
    )

    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["status"] == "completed"
    assert len(planner_calls) == 1  # the worker's answer to the first call was used
    assert conn.hget(RunKeys(run_id).model_call("planner"), "attempt") == "1"
