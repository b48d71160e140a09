"""The Python API: a Team run from code returns the same typed result as `teamctl run --json`;
a started run can be attached to, waited for and cancelled from anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.runs.run_follow import events_reader_name
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RUNS_INDEX, RunKeys
from teamctl.shared.redis.embedded import EmbeddedRedis
from teamctl.shared.runs.store import RunStore

import teamctl
from teamctl import (
    ConfigError,
    InfraError,
    McpServer,
    Member,
    MessageEvent,
    PeerMessage,
    RunStatus,
    SystemNotice,
    SystemType,
    TaskChange,
    TaskStatus,
    Team,
    attach,
)
from tests.support.faults import RestartableRedis
from tests.support.llm import HttpError, ScriptedLLM, ToolCalls
from tests.support.replies import member_answer, task_id_of
from tests.support.runs import store_run
from tests.support.timescale import scaled
from tests.support.waiting import wait_until

PLAN = [
    {"id": "a", "memberId": "m1", "task": "A"},
    {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def scripted_team(
    llm: ScriptedLLM,
    run_id: str,
    member: object = member_answer,
    *,
    synth: Sequence[str] = ("the answer",),
    **options: object,
) -> Team:
    """m1 and m2 on PLAN; `synth` empty for a run that must end without synthesis."""
    handler = member if callable(member) else None
    return Team(
        members=[Member(id="m1", description="facts"), Member(id="m2")],
        model=llm.script(f"member-{run_id}", None if handler else member, handler=handler),
        planner_model=llm.script(f"plan-{run_id}", [json.dumps(PLAN)]),
        synthesizer_model=llm.script(f"synth-{run_id}", list(synth)),
        options={"max_concurrency": 2, **options},
    )


def busy_b(body: dict) -> object:
    """A member handler: task b keeps listing tasks (busy until the run is cancelled)."""
    if task_id_of(body) == "b":
        return ToolCalls([("team_list_tasks", {})])
    return member_answer(body)


def b_in_progress(event: teamctl.RunEvent) -> bool:
    return isinstance(event, TaskChange) and (event.task_id, event.status) == ("b", "in_progress")


def test_run_returns_the_result_object_the_cli_prints(
    llm: ScriptedLLM, workers: str, run_id: str
) -> None:
    result = scripted_team(llm, run_id).run(
        "Ship it", redis_url=workers, workers=0, api_base=llm.api_base, run_id=run_id
    )

    assert (result.status, result.output) == (RunStatus.COMPLETED, "the answer")
    assert [(t.task_id, t.status) for t in result.task_states] == [
        ("a", TaskStatus.COMPLETED),
        ("b", TaskStatus.COMPLETED),
    ]
    assert result.usage.prompt_tokens == 4 * 11 and result.synthesis is not None
    status = CliRunner().invoke(main, ["status", run_id, "--redis-url", workers, "--json"])
    assert json.loads(status.stdout) == json.loads(result.model_dump_json())  # field names too
    assert result.messages and all(
        "from" in m and "from_" not in m for m in result.model_dump()["messages"]
    )
    assert teamctl.RunResult.model_validate_json(result.model_dump_json()) == result
    again = attach(run_id, redis_url=workers)
    assert again.wait(timeout=5) == result and again.status() is RunStatus.COMPLETED


def test_a_started_run_can_be_attached_to_and_cancelled_from_elsewhere(
    llm: ScriptedLLM, workers: str, run_id: str
) -> None:
    team = scripted_team(llm, run_id, member=busy_b, synth=(), member_max_steps=100_000)
    run = team.start("Ship it", redis_url=workers, workers=0, api_base=llm.api_base, run_id=run_id)
    elsewhere = attach(run_id, redis_url=workers)
    wait_until(
        lambda: (
            [t.status for t in elsewhere.result().task_states]
            == [TaskStatus.COMPLETED, TaskStatus.IN_PROGRESS]
        ),
        60,
        message="task b in progress",
    )
    with pytest.raises(TimeoutError):
        elsewhere.wait(timeout=0.5)

    message_id = elsewhere.send("m2", "Focus on exactly-once delivery")
    waited: list[teamctl.RunResult] = []
    waiter = threading.Thread(target=lambda: waited.append(elsewhere.wait(timeout=120)))
    waiter.start()  # blocked on the run's events stream until the run ends
    elsewhere.cancel()
    result = run.wait(timeout=120)
    waiter.join(timeout=5)  # woken by the end's run.end entry, not a poll or its 10 s block
    assert not waiter.is_alive() and [w.status for w in waited] == [RunStatus.CANCELLED]

    assert result.status is RunStatus.CANCELLED and result.output is None
    assert elsewhere.wait(timeout=5).status is RunStatus.CANCELLED
    with pytest.raises(ConfigError, match="already finished"):
        elsewhere.cancel()
    with pytest.raises(ConfigError, match="already finished"):
        elsewhere.send("m2", "too late")
    # The run's history as typed events, in order, ending with the run (sync and asyncio).
    events = list(elsewhere.events())
    assert events == asyncio.run(_collected(elsewhere))
    tasks = [(e.task_id, e.status) for e in events if isinstance(e, TaskChange)]
    assert tasks[:2] == [("a", "created"), ("b", "created")] and ("a", "completed") in tasks
    messages = [e.message for e in events if isinstance(e, MessageEvent)]
    sent = next(m for m in messages if m.id == message_id)
    assert isinstance(sent, PeerMessage)
    assert (sent.from_, sent.to, sent.content) == ("lead", "m2", "Focus on exactly-once delivery")
    # The same Envelope variants as the result's messages (a SystemNotice's type an enum).
    assert messages == elsewhere.result().messages
    assert isinstance(messages[-1], SystemNotice)
    assert messages[-1].type is SystemType.RUN_CANCELLED


async def _collected(run: teamctl.Run) -> list[teamctl.RunEvent]:
    return [event async for event in run.aevents()]


def test_arun_returns_the_result_object(llm: ScriptedLLM, workers: str, run_id: str) -> None:
    result = asyncio.run(
        scripted_team(llm, run_id).arun(
            "Ship it", redis_url=workers, workers=0, api_base=llm.api_base, run_id=run_id
        )
    )

    assert (result.status, result.output) == (RunStatus.COMPLETED, "the answer")
    assert result == attach(run_id, redis_url=workers).result()


def test_aevents_follows_a_live_run_and_leaving_early_closes_its_reader(
    llm: ScriptedLLM, workers: str, wconn: redis.Redis, run_id: str
) -> None:
    team = scripted_team(llm, run_id, member=busy_b, synth=(), member_max_steps=100_000)
    run = team.start("Ship it", redis_url=workers, workers=0, api_base=llm.api_base, run_id=run_id)

    def readers() -> list[dict]:
        return [c for c in wconn.client_list() if c["name"] == events_reader_name(run_id)]

    async def watch() -> tuple[list[teamctl.RunEvent], teamctl.RunResult]:
        events = run.aevents()
        seen = []
        async for event in events:  # live: b is still running when this loop ends
            seen.append(event)
            if b_in_progress(event):
                break
        assert readers() and run.status() is RunStatus.RUNNING
        # Once nothing more comes while b is busy, a read in flight is cancelled, which closes
        # the generator once that read returns (its blocking connection with it).
        while True:
            try:
                seen.append(await asyncio.wait_for(anext(events), timeout=0.5))
            except TimeoutError:
                break
        # Closed by now; Redis drops a closed client from CLIENT LIST on its next event loop
        # turn, which may come after this process's next command.
        wait_until(lambda: readers() == [], 5, message="the events reader to be closed")
        with pytest.raises(StopAsyncIteration):
            await anext(events)
        with pytest.raises(TimeoutError):
            await run.await_result(timeout=0.2)
        run.cancel()
        return seen, await run.await_result(timeout=120)

    try:
        seen, result = asyncio.run(asyncio.wait_for(watch(), timeout=180))
    finally:  # a failed check must not leave b busy for the next test
        if not run.status().finished:
            run.cancel()
            run.wait(timeout=120)

    assert [(e.task_id, e.status) for e in seen if isinstance(e, TaskChange)] == [
        ("a", "created"),
        ("b", "created"),
        ("a", "in_progress"),
        ("a", "completed"),
        ("b", "in_progress"),
    ]
    assert result.status is RunStatus.CANCELLED


def test_a_failed_run_is_a_result_whether_started_here_or_attached_to(
    llm: ScriptedLLM, workers: str, run_id: str
) -> None:
    planner = llm.script(f"plan-{run_id}", [HttpError(400, "context window exceeded, sorry")])
    run = Team([Member(id="m1")], model=planner).start(
        "Ship it", redis_url=workers, workers=0, api_base=llm.api_base, run_id=run_id
    )
    elsewhere = attach(run_id, redis_url=workers)

    attached = elsewhere.wait(timeout=60)
    here = run.wait(timeout=60)

    assert here == attached and here.status is RunStatus.FAILED
    assert here.error is not None and here.error.startswith("planner failed: ")
    assert "context window exceeded, sorry" in here.error
    assert here.plan.tasks == [] and here.member_results == []
    assert list(run.events()) == list(elsewhere.events()) == []  # it ended before any task


def test_a_run_past_its_timeout_is_cancelled_and_the_members_late_write_refused(
    llm: ScriptedLLM, workers: str, wconn: redis.Redis, run_id: str
) -> None:
    """Team.run's timeout stops its coordinator thread and cancels the run, as Ctrl-C does."""
    timeout = scaled(40, floor_s=2.0)  # planning on the warm shared workers takes far less
    member_s = timeout + scaled(40, floor_s=5.0)  # still in its call when the timeout passes
    plan = [{"id": "a", "memberId": "m1", "task": "A"}]
    team = Team(
        [Member(id="m1")],
        model=llm.script(f"member-{run_id}", ["too late"], latency_s=member_s),
        planner_model=llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        synthesizer_model=llm.script(f"synth-{run_id}", []),
        # Long TTLs: the coordinator must notice the timeout without a TTL-paced wake-up.
        options={"heartbeat_ttl_s": 90, "lease_ttl_s": 90},
    )
    started = time.monotonic()

    with pytest.raises(TimeoutError) as timed_out:
        team.run(
            "Ship it",
            redis_url=workers,
            workers=0,
            api_base=llm.api_base,
            run_id=run_id,
            timeout=timeout,
        )

    assert time.monotonic() - started < member_s  # it did not wait for the member's call
    assert str(timed_out.value) == (
        f"run {run_id} did not end within {timeout} s; it was cancelled"
    )
    state = RunStore(wconn, RunKeys(run_id)).state()
    assert (state.status, state.error) == ("cancelled", "cancelled")
    assert not wconn.exists(RunKeys(run_id).lease)
    # Neither the coordinator's thread (teamctl-run-ID) nor its lease's renewal thread is left.
    assert [t.name for t in threading.enumerate() if run_id in t.name] == []
    board = TaskBoard(wconn, RunKeys(run_id))
    assert (board.get("a").status, board.get("a").error) == ("failed", "cancelled")
    assert len(llm.requests[f"member-{run_id}"]) == 1  # the call was in flight
    # The member's reply comes after the run ended: its write is refused and counted.
    wait_until(
        lambda: board.get("a").stale_writes == 1,
        member_s + 30,
        message="the member's late write to be refused",
    )
    a = board.get("a")
    assert (a.status, a.error, a.output) == ("failed", "cancelled", None)
    assert attach(run_id, redis_url=workers).result().status is RunStatus.CANCELLED


def test_the_run_methods_raise_infra_errors_when_redis_refuses_or_is_gone(
    tmp_path: Path, run_id: str
) -> None:
    with RestartableRedis(tmp_path / "redis") as server:
        conn = redis.Redis.from_url(server.url, decode_responses=True)
        store_run(conn, run_id, redis_outage_s=0.5)  # the outage each call rides out
        run = attach(run_id, redis_url=server.url)
        conn.config_set("maxmemory", "1")  # noeviction: every write is refused (OOM)
        with pytest.raises(InfraError, match=r"^Redis is out of memory: .*maxmemory"):
            run.send("m1", "hello")
        conn.config_set("maxmemory", "0")
        server.stop()
        for call in (
            run.status,
            run.result,
            lambda: run.wait(timeout=5),
            lambda: list(run.events()),
            lambda: run.send("m1", "hello"),
            run.cancel,
        ):
            with pytest.raises(InfraError, match=r"^Redis is unreachable: "):
                call()


def test_bad_input_is_a_config_error_before_anything_is_written(
    redis_url: str, run_id: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="objective is empty"):
        Team().start("  ", redis_url=redis_url, run_id=run_id)
    with pytest.raises(ConfigError, match="unknown field"):
        Team.from_file(_bad_team_file(tmp_path / "team.toml"))
    assert redis.Redis.from_url(redis_url).zcard(RUNS_INDEX) == 0
    with pytest.raises(ConfigError):
        attach("no-such-run", redis_url=redis_url)
    with pytest.raises(ConfigError, match=r"^Team\(\.\.\.\): options\.max_rounds: "):
        Team(options={"max_rounds": "many"})
    # A removed option is refused as in a team file, not silently dropped.
    with pytest.raises(
        ConfigError,
        match=r"^Team\(\.\.\.\): options\."
        r"allow_dynamic_member_registration: removed: a run's roster is fixed "
        r".*; drop it from options$",
    ) as removed:
        Team(options={"allow_dynamic_member_registration": True})
    assert "\n" not in str(removed.value)
    # The caller's Member is left as given when the team resolves its MCP servers.
    member = Member(id="r", mcp=["git"])
    Team([member], mcp_servers=[McpServer(name="git", command=["mcp-server-git"])])
    Team([member], mcp_servers=[McpServer(name="git", command=["other-git"])])
    assert member.mcp_servers == []


def _bad_team_file(path: Path) -> Path:
    path.write_text('colour = "blue"\n')
    return path


def test_the_package_exports_only_the_public_names_and_imports_no_litellm() -> None:
    code = (
        "import sys, teamctl\n"
        "names = [n for n in teamctl.__all__ if n != '__version__']\n"
        "[getattr(teamctl, n) for n in names]\n"
        "print('litellm' in sys.modules, 'teamctl.worker.jobs' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr
    assert set(teamctl.__all__) - {"__version__"} == set(teamctl._EXPORTS)
    with pytest.raises(AttributeError):
        teamctl.Coordinator  # noqa: B018


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_each_example_runs_on_the_embedded_defaults(example: str, tmp_path: Path) -> None:
    try:
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / example)],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
    finally:
        EmbeddedRedis(tmp_path / "state" / "redis").stop()
    # Each example exits non-zero unless its run completed, and says how it ended.
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status: completed" in done.stdout.splitlines(), done.stdout


def test_the_api_warns_when_it_starts_or_replaces_pool_workers(tmp_path: Path) -> None:
    """Pool workers outlive the call: a script with no logging set-up still hears of them."""
    example = str(EXAMPLES / "run_a_team.py")
    try:
        first = subprocess.run(
            [sys.executable, example], capture_output=True, text=True, timeout=240, cwd=tmp_path
        )
        other = {**os.environ, "PYTHONPATH": str(tmp_path / "elsewhere")}
        second = subprocess.run(
            [sys.executable, example],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
            env=other,
        )
    finally:
        EmbeddedRedis(tmp_path / "state" / "redis").stop()

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "started 2 local pool workers on members;" in first.stderr, first.stderr
    assert "replacing 2 local pool workers on members started with another PYTHONPATH" in (
        second.stderr
    ), second.stderr
