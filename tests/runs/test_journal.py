"""Durable steps: a member's model replies and tool results are journaled while its claim holds,
and the attempt after a crash replays them, so no recorded model call is paid twice and no
recorded tool runs twice; a stale attempt cannot add to the journal.

The crash test starts three workers of its own on a queue of its own (as test_worker_kill) and
SIGKILLs the one whose member is waiting on its 5th model call of 8; another runs the same crash
with the dead worker on another host (a network namespace)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import Result
from teamctl.coordinator.local_workers.processes import LocalWorkers, worker_command
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.journal import AppendRefused, StepJournal
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.worker.jobs import execute_task

from tests.support.cli import run_one_task_in_thread
from tests.support.hosts import RedisHost, TwoHosts, redis_host
from tests.support.llm import Held, ScriptedLLM, ToolCalls
from tests.support.runs import make_run
from tests.support.timescale import scaled
from tests.support.waiting import wait_until
from tests.support.workers import job_and_worker_pids, workers_on_own_queue

TTL_S = scaled(RunOptions().heartbeat_ttl_s, floor_s=1.5)
STEPS = 8
CRASH_AT = 5
PROMPT_TOKENS = 11
"""What the scripted server reports for every call."""
TOOL = "tests.pytools_fixture.tools:count_step"


@pytest.fixture(scope="module")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_workers(
    redis_server: str, queue: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalWorkers]:
    with workers_on_own_queue(
        redis_server, queue, 3, tmp_path_factory.mktemp("journal-logs")
    ) as group:
        yield group


class EightSteps:
    """The member: a tool call at each of steps 1-7, then its answer; the CRASH_AT-th request
    the server gets is held until the test has killed the worker that made it."""

    def __init__(self, log: Path, *, server_free: bool = False) -> None:
        self.log = log
        self.server_free = server_free
        """Hold the CRASH_AT-th reply outside the server's lock (Held), so later calls are
        answered meanwhile; else in the handler (the dead worker never reads it anyway)."""
        self.requests = 0
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls | Held:
        self.requests += 1
        step = sum(m.get("role") == "assistant" for m in body["messages"]) + 1
        reply: str | ToolCalls = f"all {STEPS} steps done"
        if step < STEPS:
            reply = ToolCalls([(TOOL.rsplit(":", 1)[1], {"path": str(self.log), "step": step})])
        if self.requests == CRASH_AT:
            self.held.set()
            if self.server_free:
                return Held(reply, self.release)
            self.release.wait(60)
        return reply


def run_in_thread(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    queue: str,
    tmp_path: Path,
    member: EightSteps,
    latency_s: float,
) -> tuple[threading.Thread, list[Result]]:
    return run_one_task_in_thread(
        llm,
        redis_url,
        run_id,
        queue,
        tmp_path,
        member_model=llm.script(f"m1-{run_id}", handler=member, latency_s=latency_s),
        tool=TOOL,
        task="Do the eight steps",
        heartbeat_ttl_s=TTL_S,
    )


def test_a_crash_mid_session_repeats_only_the_step_in_flight(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    own_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    crash_then_replay(llm, redis_server, run_id, queue, tmp_path, latency_s=0)


@pytest.mark.realistic
def test_a_crash_at_the_defaults_with_slow_calls_repeats_only_the_step_in_flight(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    own_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    crash_then_replay(llm, redis_server, run_id, queue, tmp_path, latency_s=scaled(3))


def crash_then_replay(
    llm: ScriptedLLM, redis_server: str, run_id: str, queue: str, tmp_path: Path, latency_s: float
) -> None:
    """A member of 8 steps, its worker SIGKILLed while its 5th model call is in flight."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    member = EightSteps(tmp_path / "tool-runs.log")
    thread, results = run_in_thread(llm, redis_server, run_id, queue, tmp_path, member, latency_s)
    try:
        assert member.held.wait(90 + 10 * latency_s), "the member's 5th model call"
        horse, parent = job_and_worker_pids(board.get("work").worker or "")
        os.kill(parent, signal.SIGKILL)
        os.kill(horse, signal.SIGKILL)
    finally:
        member.release.set()
    thread.join(90 + 2 * TTL_S + 10 * latency_s)

    assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
    task = board.get("work")
    assert (task.status, task.output, task.attempts) == (
        TaskStatus.COMPLETED,
        f"all {STEPS} steps done",
        2,
    )
    # The dead attempt's 4 recorded steps were replayed; only its 5th call was made again.
    assert member.requests == STEPS + 1
    assert task.replayed_steps == CRASH_AT - 1
    note = conn.get(RunKeys(run_id).transcript("work")) or ""
    assert f"replayed its first {CRASH_AT - 1} step(s)" in json.loads(note)[-1]["content"]
    # Each tool call ran once: the recorded ones were not run again.
    assert (tmp_path / "tool-runs.log").read_text().split() == [
        str(step) for step in range(1, STEPS)
    ]
    # Usage counts each call once: the 8 that answered (the killed one never did).
    assert task.usage.prompt_tokens == STEPS * PROMPT_TOKENS
    results_sent = [
        m for m in MessageBus(conn, RunKeys(run_id)).messages() if m.type == "task.result"
    ]
    assert len(results_sent) == 1


def test_a_stale_attempt_cannot_add_to_the_journal(conn: redis.Redis, run_id: str) -> None:
    keys = RunKeys(run_id)
    conn.hset(
        keys.task("t1"),
        mapping={
            "task_id": "t1",
            "token": "2@e",
            "status": "in_progress",
            "requeue_reason": "claim expired",
        },
    )
    live = StepJournal(conn, keys, "t1", "2@e", 10_000)
    stale = StepJournal(conn, keys, "t1", "1@e", 10_000)
    live.record_reply("m1", 1, ModelReply(content="live"))
    stale.record_reply("m1", 1, ModelReply(content="stale"))
    stale.record_result("m1", 1, "call_0", "stale result")
    assert stale.lost and not live.lost
    assert [s.reply.content for s in live.steps_for("m1", crashed=True)] == ["live"]
    with pytest.raises(AppendRefused):
        stale.note_replayed(1)


def test_a_journal_is_replayed_only_after_a_crash_and_for_its_own_member(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    conn.hset(keys.task("t1"), mapping={"task_id": "t1", "token": "3@e", "status": "in_progress"})
    journal = StepJournal(conn, keys, "t1", "3@e", 10_000)
    journal.record_reply("m1", 1, ModelReply(content="step one"))
    journal.record_result("m1", 1, "call_0", "its result")
    [step] = journal.steps_for("m1", crashed=True)
    assert (step.reply.content, step.results) == ("step one", {"call_0": "its result"})
    assert journal.steps_for("m2", crashed=True) == []  # another member's session: dropped
    assert conn.llen(keys.journal("t1")) == 0
    journal.record_reply("m1", 1, ModelReply(content="again"))
    assert journal.steps_for("m1", crashed=False) == []  # released: starts over
    assert conn.llen(keys.journal("t1")) == 0


def test_a_full_journal_keeps_its_prefix(conn: redis.Redis, run_id: str) -> None:
    keys = RunKeys(run_id)
    conn.hset(keys.task("t1"), mapping={"task_id": "t1", "token": "4@e", "status": "in_progress"})
    journal = StepJournal(conn, keys, "t1", "4@e", 200)
    journal.record_reply("m1", 1, ModelReply(content="short"))
    journal.record_reply("m1", 2, ModelReply(content="x" * 300))
    journal.record_reply("m1", 3, ModelReply(content="short again"))
    assert journal.full
    assert [s.reply.content for s in journal.steps_for("m1", crashed=True)] == ["short"]


def test_a_python_tool_gets_the_calls_idempotency_key(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"m1-{run_id}", [ToolCalls([("call_key", {}), ("call_key", {})]), "done"])
    make_run(
        conn,
        run_id,
        models={"m1": model},
        api_base=llm.api_base,
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Say your keys")],
        workspace=tmp_path / "ws",
        tools={"m1": ["tests.pytools_fixture.tools:call_key"]},
    )
    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    _, answered = llm.requests[f"m1-{run_id}"]
    keys = [m["content"] for m in answered["messages"] if m["role"] == "tool"]
    assert keys == [f"{run_id}:task_1:call_0", f"{run_id}:task_1:call_1"]


def run_from_the_other_host(
    two_hosts: TwoHosts,
    host: RedisHost,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    member: EightSteps,
) -> tuple[threading.Thread, list[Result]]:
    """A worker on queue `work` in namespace b, then the run in a thread (no worker here yet:
    the task goes to the other host)."""
    with (tmp_path / "remote-worker.log").open("wb") as log:
        host.processes.append(
            two_hosts.exec(
                two_hosts.b,
                worker_command(host.remote_url, ["work"]),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    wait_until(lambda: host.conn.scard("rq:workers:work") == 1, 60, message="remote worker")
    return run_in_thread(llm, host.local_url, run_id, "work", tmp_path, member, 0)


def test_a_task_reclaimed_by_a_worker_on_another_host_replays_the_journal(
    two_hosts: TwoHosts,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The journal is in Redis, not on the dead worker's host: a worker in another network
    namespace records steps 1-4 and dies in the 5th; this host's worker replays them."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "redis")  # its members are on two hosts
    member = EightSteps(tmp_path / "tool-runs.log")
    with redis_host(two_hosts, llm) as host:
        board = TaskBoard(host.conn, RunKeys(run_id))
        here = LocalWorkers(host.local_url, ["work"], 1, tmp_path / "logs")
        try:
            thread, results = run_from_the_other_host(
                two_hosts, host, llm, run_id, tmp_path, member
            )
            try:
                assert member.held.wait(90), "the remote member's 5th model call"
                remote_worker = board.get("work").worker or ""
                for pid in job_and_worker_pids(remote_worker):
                    os.kill(pid, signal.SIGKILL)
            finally:
                member.release.set()
            here.start()  # this host's worker takes the task once it is reclaimed
            thread.join(90 + 2 * TTL_S)
            assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
            task = board.get("work")
        finally:
            here.stop()
    assert (task.status, task.attempts, task.replayed_steps) == (
        TaskStatus.COMPLETED,
        2,
        CRASH_AT - 1,
    )
    assert task.worker != remote_worker
    assert member.requests == STEPS + 1
    assert (tmp_path / "tool-runs.log").read_text().split() == [
        str(step) for step in range(1, STEPS)
    ]


def test_an_attempt_cut_off_and_back_cannot_add_to_the_journal(
    two_hosts: TwoHosts,
    llm: ScriptedLLM,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker in the other namespace is cut off while its 5th call is out; this host's
    worker replays and finishes; the link returns and the cut-off attempt gets its reply: its
    append is refused, and the journal holds exactly what the two live attempts recorded."""
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "redis")  # its members are on two hosts
    member = EightSteps(tmp_path / "tool-runs.log", server_free=True)
    with redis_host(two_hosts, llm) as host:
        conn, board = host.conn, TaskBoard(host.conn, RunKeys(run_id))
        here = LocalWorkers(host.local_url, ["work"], 1, tmp_path / "logs")
        try:
            thread, results = run_from_the_other_host(
                two_hosts, host, llm, run_id, tmp_path, member
            )
            assert member.held.wait(90), "the remote member's 5th model call"
            two_hosts.cut()
            here.start()  # this host's worker takes the task once it is reclaimed
            thread.join(90 + 2 * TTL_S)
            assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
            two_hosts.restore()
            member.release.set()  # the cut-off attempt's reply: it tries to record it
            wait_until(
                lambda: board.get("work").stale_writes >= 1,
                90,
                message="the cut-off attempt's refused write",
            )
            task = board.get("work")
            journal = conn.lrange(RunKeys(run_id).journal("work"), 0, -1)
        finally:
            member.release.set()
            here.stop()
    assert (task.status, task.attempts, task.replayed_steps) == (
        TaskStatus.COMPLETED,
        2,
        CRASH_AT - 1,
    )
    # Steps 1-4 (a reply, a tool call's start and its result each) from the first attempt, 5-8
    # from the second (the 8th has no tool): nothing from the cut-off attempt's late reply.
    assert len(journal) == 3 * (CRASH_AT - 1) + (STEPS - CRASH_AT + 1) + 2 * (STEPS - CRASH_AT)
    assert [json.loads(e)["step"] for e in journal if json.loads(e)["kind"] == "reply"] == list(
        range(1, STEPS + 1)
    )
