"""Traces across processes: a run is one trace over its coordinator and its workers (a reclaimed
attempt's included), a message links its receiver to its sender, a teammate's turn is a trace of
its own, and with the OTEL variables unset nothing of OpenTelemetry is imported.

This module's workers are its own, on a queue of its own, started with the OTEL variables set
(pointing at a receiver of the module's), so the session's workers never see its jobs; one test
freezes a worker's job, and a spare always remains.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from rq import Queue
from teamctl.coordinator.cli import main
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.coordinator.runs.run_control import cancel_run
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.cli import TEAMCTL, assert_config_error
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.support.replies import (
    BUSY,
    busy_until,
    member_answer,
    script_run,
    task_id_of,
    tool_results,
)
from tests.support.runs import make_run
from tests.support.teamfile import team_file
from tests.support.teams import spawn
from tests.support.timescale import scaled, timing_options
from tests.support.waiting import wait_until
from tests.support.workers import job_and_worker_pids, workers_on_own_queue

TTL_S = scaled(RunOptions().heartbeat_ttl_s, floor_s=1.5)
OTEL_OFF = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
)


def in_run(run_id: str) -> Callable[[ReceivedSpan], bool]:
    """Spans of this test's run: the module's receiver also holds earlier tests' spans."""
    return lambda span: span.attributes.get("teamctl.run_id") == run_id


def in_team(team: str) -> Callable[[ReceivedSpan], bool]:
    """Spans of this test's team."""
    return lambda span: span.attributes.get("teamctl.team") == team


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as found:
        yield found


@pytest.fixture(scope="module")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def traced_workers(
    redis_server: str, queue: str, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalWorkers]:
    """Three preloaded, forking workers whose jobs export to `receiver`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        with workers_on_own_queue(
            redis_server, queue, 3, tmp_path_factory.mktemp("traced-logs")
        ) as group:
            patch.undo()
            yield group


def traced_run(
    llm: ScriptedLLM, redis_url: str, run_id: str, team: Path, receiver: OtlpReceiver
) -> Result:
    """`teamctl run --json` as a traced coordinator (its own workers: none)."""
    return CliRunner().invoke(
        main,
        [
            "run",
            "Trace me",
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
        ],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
    )


def of_run(receiver: OtlpReceiver, trace_id: str) -> list[ReceivedSpan]:
    return [span for span in receiver.snapshot() if span.trace_id == trace_id]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


class FrozenFirstAttempt:
    """The member model: the first call waits until the test says so; later attempts call a tool
    once, then answer."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        self.calls += 1
        if self.calls == 1:
            self.release.wait(60)
            return "late answer from the first worker"
        return "rescued answer" if tool_results(body) else BUSY


def test_a_run_with_a_reclaim_is_one_trace_over_coordinator_and_workers(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    member = FrozenFirstAttempt()
    plan = {"tasks": [{"id": "work", "memberId": "m1", "task": "Do the work"}]}
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "member": llm.script(f"m1-{run_id}", handler=member),
        "synth": llm.script(f"synth-{run_id}", ["final"]),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        members=[{"id": "m1", "queue": queue}],
        queue=queue,
        options={"heartbeat_ttl_s": TTL_S},
    )
    results: list[Result] = []
    thread = threading.Thread(
        target=lambda: results.append(traced_run(llm, redis_server, run_id, team, receiver))
    )
    thread.start()
    horse = 0
    try:
        wait_until(lambda: member.calls == 1, 60, message="the first model call")
        horse, _ = job_and_worker_pids(board.get("work").worker or "")
        os.kill(horse, signal.SIGSTOP)  # it stops beating: the claim expires, a reclaim follows
        member.release.set()  # its late answer waits in the socket of a frozen process
        thread.join(60 + 4 * TTL_S)
        assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
    finally:
        member.release.set()
        if horse:
            os.kill(horse, signal.SIGCONT)
    task = board.get("work")
    assert (task.status, task.output, task.attempts) == (TaskStatus.COMPLETED, "rescued answer", 2)

    traceparent = RunStore(conn, RunKeys(run_id)).state().traceparent
    assert traceparent, "the run keeps its trace"
    trace_id = traceparent.split("-")[1]
    # The frozen attempt exports once it wakes and its write is refused.
    wait_until(
        lambda: len([s for s in of_run(receiver, trace_id) if s.name == "invoke_agent m1"]) == 2,
        60,
        message="both attempts' spans",
    )
    spans = of_run(receiver, trace_id)
    assert {
        span.trace_id
        for span in receiver.snapshot()
        if span.attributes.get("teamctl.run_id") == run_id
    } == {trace_id}
    by_id = {span.span_id: span for span in spans}

    workflow = one(spans, "invoke_workflow")
    assert workflow.parent_id == "" and workflow.attributes["teamctl.run_id"] == run_id
    assert workflow.resource["service.name"] == "teamctl-coordinator"
    plan_span, synthesis = one(spans, "plan"), one(spans, "synthesize")
    rounds = [span for span in spans if span.name.startswith("round ")]
    assert rounds and all(s.parent_id == workflow.span_id for s in [plan_span, synthesis, *rounds])
    assert any(
        e.name == "teamctl.task.reclaimed" and e.attributes["teamctl.task_id"] == "work"
        for span in rounds
        for e in span.events
    )

    chats = [span for span in spans if span.name.startswith("chat ")]
    assert {by_id[s.parent_id].name for s in chats} == {"plan", "synthesize", "invoke_agent m1"}

    attempts = sorted(
        (s for s in spans if s.name == "invoke_agent m1"),
        key=lambda s: s.attributes["teamctl.attempt"],
    )
    assert [s.attributes["teamctl.attempt"] for s in attempts] == [1, 2]
    for span in attempts:
        assert by_id[span.parent_id].name.startswith("round ")
        assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert (span.attributes["teamctl.task_id"], span.attributes["teamctl.member"]) == (
            "work",
            "m1",
        )
        assert span.attributes["process.pid"] == span.resource["process.pid"] != os.getpid()
        assert span.resource["service.name"] == "teamctl-worker"
        assert span.resource["host.name"] == span.attributes["host.name"]
    frozen, rescuer = attempts
    assert frozen.attributes["process.pid"] == horse
    assert "teamctl.write.refused" in frozen.event_names()
    assert rescuer.attributes["teamctl.outcome"] == "completed"

    member_chats = [s for s in chats if s.parent_id == rescuer.span_id]
    assert len(member_chats) == 2
    for chat in member_chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == models["member"]
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert "gen_ai.response.model" in chat.attributes
    tool = one(spans, "execute_tool team_list_tasks")
    assert tool.parent_id == rescuer.span_id
    assert tool.attributes["gen_ai.tool.name"] == "team_list_tasks"
    assert tool.attributes["gen_ai.tool.call.id"]
    # Names, ids and sizes only: no model-written text in any attribute.
    assert not any(
        "rescued answer" in str(v) or "Do the work" in str(v)
        for span in spans
        for v in span.attributes.values()
    )


def test_a_message_links_its_receiver_to_its_sender(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    plan = {
        "tasks": [
            {"id": "a", "memberId": "m1", "task": "A"},
            {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
        ]
    }
    send = ToolCalls([("team_send_message", {"toMemberId": "m2", "content": "over to you"})])

    def member(body: dict[str, Any]) -> str | ToolCalls:
        if task_id_of(body) == "a" and not tool_results(body):
            return send
        return member_answer(body)

    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "member": llm.script(f"member-{run_id}", handler=member),
        "synth": llm.script(f"synth-{run_id}", ["final"]),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        queue=queue,
        members=[{"id": "m1", "queue": queue}, {"id": "m2", "queue": queue}],
    )

    result = traced_run(llm, redis_server, run_id, team, receiver)

    assert result.exit_code == 0, result.output
    spans = receiver.wait_for("invoke_agent m2", where=in_run(run_id))
    sender = one(receiver.wait_for("invoke_agent m1", where=in_run(run_id)), "invoke_agent m1")
    receiving = one(spans, "invoke_agent m2")
    assert [(link.trace_id, link.span_id) for link in receiving.links] == [
        (sender.trace_id, sender.span_id)
    ]
    assert receiving.links[0].attributes["teamctl.from"] == "m1"
    assert receiving.parent_id != sender.span_id  # a link, not a parent


def test_a_teammate_turn_is_a_trace_linked_to_the_message_that_woke_it(
    llm: ScriptedLLM,
    redis_server: str,
    team: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
) -> None:
    bob = llm.script(f"bob-{team}", ["ready", "thanks alice"])
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("send_message", {"to": "bob", "content": "hi bob"})]), "sent it"],
    )
    store = TeamStore(redis.Redis.from_url(redis_server, decode_responses=True), team)
    assert spawn(redis_server, team, "bob", bob, llm.api_base, "--queue", queue).exit_code == 0
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, message="bob's first turn")
    assert spawn(redis_server, team, "alice", alice, llm.api_base, "--queue", queue).exit_code == 0
    wait_until(
        lambda: (
            len(llm.requests[f"bob-{team}"]) == 2 and store.get("bob").status is TeammateStatus.IDLE
        ),
        message="bob's answer",
    )

    def turns(name: str) -> list[ReceivedSpan]:
        return [
            s
            for s in receiver.named(f"invoke_agent {name}")
            if s.attributes.get("teamctl.team") == team
        ]

    wait_until(
        lambda: len(turns("bob")) == 2 and len(turns("alice")) == 1,
        30,
        message="the three turns' spans",
    )
    [sender] = turns("alice")
    first, answering = sorted(turns("bob"), key=lambda s: len(s.links))
    assert all(s.parent_id == "" for s in [sender, first, answering])  # each turn a trace
    assert len({s.trace_id for s in [sender, first, answering]}) == 3
    assert [(link.trace_id, link.span_id) for link in answering.links] == [
        (sender.trace_id, sender.span_id)
    ]
    sent = one(
        [s for s in receiver.snapshot() if s.trace_id == sender.trace_id],
        "execute_tool send_message",
    )
    assert sent.parent_id == sender.span_id
    chats = [
        s
        for s in receiver.snapshot()
        if s.trace_id == answering.trace_id and s.name.startswith("chat ")
    ]
    assert [c.parent_id for c in chats] == [answering.span_id]


def test_a_budget_pause_is_an_event_of_the_attempt_and_of_the_run(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    plan = {"tasks": [{"id": "work", "memberId": "m1", "task": "Keep busy"}]}
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "member": llm.script(f"member-{run_id}", [BUSY], repeat_last=True),
        "synth": llm.script(f"synth-{run_id}", []),
    }
    # The planner's call (18 tokens) and the member's first (18 more) spend it: that step is
    # the attempt's last, then it gives the task back and the run pauses.
    team = team_file(
        tmp_path / "team.toml",
        models,
        queue=queue,
        members=[{"id": "m1", "queue": queue}],
        options={"max_tokens": 20},
    )
    store = RunStore(redis.Redis.from_url(redis_server, decode_responses=True), RunKeys(run_id))
    done: list[Result] = []
    thread = threading.Thread(
        target=lambda: done.append(traced_run(llm, redis_server, run_id, team, receiver)),
        daemon=True,
    )
    thread.start()
    wait_until(
        lambda: store.exists() and store.state().status == "awaiting_budget",
        60,
        message="the run to pause on its budget",
    )
    store.request_stop("cancelled")
    thread.join(60)

    [result] = done
    assert json.loads(result.stdout)["status"] == "cancelled"
    [attempt] = receiver.wait_for("invoke_agent m1", where=in_run(run_id))
    assert "teamctl.budget.exceeded" in attempt.event_names()
    assert attempt.attributes["teamctl.outcome"] == "awaiting budget"
    assert attempt.status_code != 2  # given back for later: not a failure
    workflow = one(of_run(receiver, attempt.trace_id), "invoke_workflow")
    assert "teamctl.run.awaiting_budget" in workflow.event_names()


def test_a_cancel_is_an_event_of_the_attempt_and_of_the_run(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    plan = {"tasks": [{"id": "work", "memberId": "m1", "task": "Keep busy"}]}
    member = f"member-{run_id}"
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "member": llm.script(member, [BUSY], repeat_last=True),
        "synth": llm.script(f"synth-{run_id}", []),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        queue=queue,
        members=[{"id": "m1", "queue": queue}],
        # The member's failure ("run cancelled") must not stop the run first.
        options={"member_max_steps": 100_000, "continue_on_member_error": True},
    )
    results: list[Result] = []
    thread = threading.Thread(
        target=lambda: results.append(traced_run(llm, redis_server, run_id, team, receiver))
    )
    thread.start()
    try:
        wait_until(lambda: len(llm.requests[member]) >= 2, 60, message="a busy member")
        # What `teamctl cancel` does, without a second CliRunner swapping this process's
        # streams and environment under the running one; its coordinator stops it.
        assert not cancel_run(
            RunHandle(redis.Redis.from_url(redis_server, decode_responses=True), run_id)
        )
    finally:
        thread.join(60)
    assert not thread.is_alive() and json.loads(results[0].stdout)["status"] == "cancelled", (
        results[0].output
    )
    [attempt] = receiver.wait_for("invoke_agent m1", where=in_run(run_id))
    assert "teamctl.run.cancelled" in attempt.event_names(), attempt
    workflow = one(of_run(receiver, attempt.trace_id), "invoke_workflow")
    assert "teamctl.run.cancelled" in workflow.event_names(), workflow


OFF_PROBE = """
import json, sys
def otel():
    return {m for m in sys.modules if m.startswith(("opentelemetry", "teamctl.shared.tracing_"))}
import redis  # redis-py 8 imports opentelemetry.sdk.metrics itself when it is installed
by_redis = otel()
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.worker.jobs import run_task
result = CliRunner().invoke(main, sys.argv[1:])
job = run_task(*json.loads(sys.stdin.read()))
print(json.dumps({"exit": result.exit_code, "output": result.stdout, "job": job,
                  "litellm": "litellm" in sys.modules, "otel": sorted(otel() - by_redis),
                  "tracer": "opentelemetry.sdk.trace" in sys.modules}))
"""


def test_with_the_variables_unset_a_run_and_a_job_import_nothing_of_opentelemetry(
    llm: ScriptedLLM, workers: str, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    models = {
        "planner": llm.script(
            f"plan-{run_id}", [json.dumps({"tasks": [{"id": "t", "memberId": "m1", "task": "T"}]})]
        ),
        "member": llm.script(f"member-{run_id}", handler=member_answer),
        "synth": llm.script(f"synth-{run_id}", ["final"]),
    }
    team = team_file(tmp_path / "team.toml", models)
    job_run = f"{run_id}-job"
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    make_run(
        conn,
        job_run,
        models={"m1": llm.script(f"job-{run_id}", ["job done"])},
        tasks=[TaskSpec(id="t", member_id="m1", task="T")],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )
    env = {name: value for name, value in os.environ.items() if name not in OTEL_OFF}
    env["REDIS_URL"] = redis_url  # run_task outside RQ
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            OFF_PROBE,
            "run",
            "Stay untraced",
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
            "--json",
        ],
        input=json.dumps([job_run, "t"]),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )

    out = json.loads(probe.stdout.strip().splitlines()[-1])
    assert out["exit"] == 0 and json.loads(out["output"])["status"] == "completed", out
    assert out["job"] == "t: completed" and out["litellm"]
    assert out["otel"] == [] and not out["tracer"]
    assert TaskBoard(conn, RunKeys(job_run)).get("t").output == "job done"


def test_traces_asked_for_without_the_extra_are_a_config_error(
    llm: ScriptedLLM, redis_url: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    team = team_file(tmp_path / "team.toml", {"planner": "p", "synth": "s", "member": "m"})
    result = CliRunner().invoke(
        main,
        ["run", "Trace me", "--team", str(team), "--redis-url", redis_url, "--run-id", run_id],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert_config_error(result, "pip install 'teamctl[otel]' or unset OTEL_EXPORTER_OTLP_ENDPOINT")
    assert not redis.Redis.from_url(redis_url).exists(RunKeys(run_id).spec)  # nothing written


@pytest.mark.parametrize("command", [["worker", "--burst"], ["workers", "start", "-n", "1"]])
def test_a_worker_asked_for_traces_without_the_extra_is_a_config_error(
    command: list[str], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    result = CliRunner().invoke(
        main,
        [*command, "--redis-url", redis_url],
        env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert_config_error(
        result, "pip install 'teamctl[otel]' or unset OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )


@pytest.mark.parametrize(
    "switch", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}]
)
def test_the_standard_switches_turn_tracing_off(
    switch: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from teamctl.shared.settings import load_settings
    from teamctl.shared.tracing import NO_TRACING, tracing_from_settings

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    for name, value in switch.items():
        monkeypatch.setenv(name, value)
    assert tracing_from_settings(load_settings(), "x") is NO_TRACING


@pytest.mark.realistic
def test_a_traced_run_at_the_default_options_is_one_trace(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    plan = {
        "tasks": [
            {"id": "a", "memberId": "m1", "task": "A"},
            {"id": "b", "memberId": "m1", "task": "B", "dependsOn": ["a"]},
        ]
    }
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)], latency_s=scaled(5)),
        "member": llm.script(f"member-{run_id}", handler=member_answer, latency_s=scaled(6)),
        "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=scaled(4)),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        queue=queue,
        members=[{"id": "m1", "queue": queue}],
        options=timing_options(),
    )

    result = traced_run(llm, redis_server, run_id, team, receiver)

    assert result.exit_code == 0, result.output
    agents = receiver.wait_for("invoke_agent m1", count=2, where=in_run(run_id))
    assert {s.attributes["teamctl.task_id"] for s in agents} == {"a", "b"}
    trace_id = agents[0].trace_id
    spans = of_run(receiver, trace_id)
    assert {s.name for s in spans} >= {
        "invoke_workflow",
        "plan",
        "round 1",
        "synthesize",
        f"chat {models['member']}",
    }
    assert {s.trace_id for s in agents} == {trace_id}
    # b runs in round 2, or in a's job when its worker claims it first: under a round either way
    rounds = {s.span_id for s in spans if s.name.startswith("round ")}
    assert {s.parent_id in rounds for s in agents} == {True}


def test_a_resumed_run_continues_the_trace_of_its_killed_coordinator(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    lease_ttl_s = scaled(15, floor_s=1.0)
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    release_b = threading.Event()
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan, member=busy_until(release_b, "b"))
    team = team_file(
        tmp_path / "t.toml",
        models,
        queue=queue,
        members=[{"id": "m1", "queue": queue}, {"id": "m2", "queue": queue}],
        options={
            "lease_ttl_s": lease_ttl_s,
            "heartbeat_ttl_s": scaled(30, floor_s=10),
            "member_max_steps": 100_000,
        },
    )
    coordinator = subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            redis_server,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
    )
    try:
        wait_until(
            lambda: (t := board.get("b")) and t.status is TaskStatus.IN_PROGRESS,
            90,
            message="task b in progress",
        )
    finally:
        os.kill(coordinator.pid, signal.SIGKILL)
        coordinator.wait(timeout=30)
    release_b.set()
    wait_until(lambda: board.get("b").status is TaskStatus.COMPLETED, 30, message="b completed")
    wait_until(
        lambda: not conn.exists(RunKeys(run_id).lease), 10 + lease_ttl_s, message="lease expiry"
    )

    resumed = CliRunner().invoke(
        main,
        ["resume", run_id, "--redis-url", redis_server, "--workers", "0"],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
    )

    assert resumed.exit_code == 0, resumed.output
    traceparent = RunStore(conn, RunKeys(run_id)).state().traceparent
    assert traceparent
    _, trace_id, first_span, _ = traceparent.split("-")
    workflows = receiver.wait_for("invoke_workflow", where=in_run(run_id))
    assert [(s.trace_id, s.parent_id, s.attributes["teamctl.resumed"]) for s in workflows] == [
        (trace_id, first_span, True)
    ]  # the killed coordinator's own span never left it
    agents = receiver.wait_for("invoke_agent m2", where=in_run(run_id))
    assert {s.trace_id for s in agents} == {trace_id}
    synthesis = one(of_run(receiver, trace_id), "synthesize")
    assert synthesis.parent_id == workflows[0].span_id


def test_a_turn_woken_by_a_task_links_to_the_span_that_added_it(
    llm: ScriptedLLM,
    redis_server: str,
    team: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
) -> None:
    # Bob never completes it: reminders may give him more turns, which link to nothing new.
    bob = llm.script(f"bob-{team}", ["ready", "on it"], repeat_last=True)
    store = TeamStore(redis.Redis.from_url(redis_server, decode_responses=True), team)
    assert spawn(redis_server, team, "bob", bob, llm.api_base, "--queue", queue).exit_code == 0
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, message="bob's first turn")

    added = CliRunner().invoke(
        main,
        [
            "team",
            "task",
            "add",
            "Write the summary",
            "--assignee",
            "bob",
            "-t",
            team,
            "--redis-url",
            redis_server,
        ],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
    )

    assert added.exit_code == 0, added.output
    [creator] = receiver.wait_for("create_task", where=in_team(team))
    assert creator.resource["service.name"] == "teamctl-cli"
    wait_until(
        lambda: (
            len(
                [
                    s
                    for s in receiver.named("invoke_agent bob")
                    if s.attributes["teamctl.team"] == team
                ]
            )
            >= 2
        ),
        30,
        message="bob's turn for the task",
    )
    woken = [
        s
        for s in receiver.named("invoke_agent bob")
        if s.attributes["teamctl.team"] == team and s.links
    ]
    assert woken and {(link.trace_id, link.span_id) for s in woken for link in s.links} == {
        (creator.trace_id, creator.span_id)
    }


def test_the_lead_turn_is_a_trace_and_the_turn_it_wakes_links_to_it(
    llm: ScriptedLLM,
    redis_server: str,
    team: str,
    queue: str,
    receiver: OtlpReceiver,
    traced_workers: LocalWorkers,
) -> None:
    bob = llm.script(f"bob-{team}", ["ready", "thanks lead"])
    lead = llm.script(
        f"lead-{team}",
        [ToolCalls([("send_message", {"to": "bob", "content": "hi bob"})]), "noted"],
        repeat_last=True,
    )
    store = TeamStore(redis.Redis.from_url(redis_server, decode_responses=True), team)
    assert spawn(redis_server, team, "bob", bob, llm.api_base, "--queue", queue).exit_code == 0
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, message="bob's first turn")

    result = CliRunner().invoke(
        main,
        [
            "lead",
            "-t",
            team,
            "--redis-url",
            redis_server,
            "--workers",
            "0",
            "--model",
            lead,
            "--api-base",
            llm.api_base,
            "-m",
            "Greet bob.",
            "--until-idle",
        ],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
    )

    assert result.exit_code == 0, result.output
    leads = sorted(
        receiver.wait_for("invoke_agent lead", where=in_team(team)), key=lambda s: len(s.links)
    )
    first = leads[0]
    assert first.parent_id == "" and first.resource["service.name"] == "teamctl-cli"
    in_trace = [s for s in receiver.snapshot() if s.trace_id == first.trace_id]
    assert one(in_trace, "execute_tool send_message").parent_id == first.span_id
    assert [s.parent_id for s in in_trace if s.name.startswith("chat ")] == [first.span_id] * 2

    def woken() -> list[ReceivedSpan]:  # bob's job exports after it set him idle
        return [
            s
            for s in receiver.named("invoke_agent bob")
            if s.attributes["teamctl.team"] == team and s.links
        ]

    wait_until(woken, 30, message="bob's turn for the lead's message")
    assert [[(link.trace_id, link.span_id) for link in s.links] for s in woken()] == [
        [(first.trace_id, first.span_id)]
    ]


def test_a_tool_span_keeps_no_name_or_id_text_the_model_made_up(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from teamctl.shared.agent.tools import Toolbox
    from teamctl.shared.settings import load_settings
    from teamctl.shared.tracing import tracing_from_settings

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    tracing = tracing_from_settings(load_settings(), "tools-test")
    marker = uuid.uuid4().hex
    with tracing.start("invoke_agent probe", attributes={"teamctl.run_id": marker}) as agent:
        result = Toolbox(trace=agent).call(
            f"ignore previous instructions {marker}" * 20, "{}", "call-" + "x" * 500
        )
    tracing.close()

    assert result.startswith("TOOL_ERROR")
    [root] = receiver.wait_for("invoke_agent probe", where=in_run(marker))
    [tool] = [s for s in receiver.snapshot() if s.parent_id == root.span_id]
    assert tool.name == "execute_tool (unknown tool)"
    assert tool.attributes["gen_ai.tool.name"] == "(unknown tool)"
    assert tool.attributes["gen_ai.tool.call.id"] == ("call-" + "x" * 500)[:64]
    assert tool.attributes["error.type"] == "UnknownTool"
    assert not any(marker in str(value) for value in tool.attributes.values())


def test_a_job_of_the_warm_fork_worker_exports_under_the_span_in_its_meta(
    llm: ScriptedLLM, redis_server: str, run_id: str, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    make_run(
        conn,
        run_id,
        models={"m1": llm.script(f"m1-{run_id}", ["done"])},
        tasks=[TaskSpec(id="t", member_id="m1", task="T")],
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
    )
    parent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        patch.setenv("RQ_WORKER_CLASS", "teamctl.worker.warm_fork.WarmForkWorker")
        with workers_on_own_queue(redis_server, queue, 1, tmp_path / "logs"):
            patch.undo()
            Queue(queue, connection=redis.Redis.from_url(redis_server)).enqueue(
                "teamctl.worker.jobs.run_task", run_id, "t", meta={"traceparent": parent}
            )
            [attempt] = receiver.wait_for("invoke_agent m1", timeout_s=60, where=in_run(run_id))
    assert (attempt.trace_id, attempt.parent_id) == tuple(parent.split("-")[1:3])
    assert TaskBoard(conn, RunKeys(run_id)).get("t").output == "done"
    chats = [s for s in receiver.snapshot() if s.parent_id == attempt.span_id]
    assert [s.name for s in chats] == [f"chat openai/m1-{run_id}"]


def test_a_tool_result_that_looks_like_an_error_puts_no_text_of_its_own_in_the_span() -> None:
    """A tool's own output may start like teamctl's tool errors (a fetched page can say
    anything): only an error type shaped like a name reaches the span."""
    from teamctl.shared.agent.tools import tool_error, tool_result_attributes

    hostile = 'TOOL_ERROR: {"errorType": "<script>x</script> a very long story"}'
    assert tool_result_attributes(hostile)["error.type"] is None
    real = tool_error("fetch", "call_1", "TimeoutError", "took too long")
    assert tool_result_attributes(real)["error.type"] == "TimeoutError"
