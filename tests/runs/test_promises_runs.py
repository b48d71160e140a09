"""README promises about a run's limits, through real workers: the cancel grace period with a
member stuck in a model call, max_attempts when every claim dies, and the model retry backoff."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import Result
from teamctl.coordinator.runs.rounds import STOP_GRACE_TTLS
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.errors import ModelError
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL, run_cli
from tests.support.llm import HttpError, ScriptedLLM, Slow
from tests.support.replies import script_run
from tests.support.teamfile import team_file
from tests.support.timescale import scaled
from tests.support.waiting import wait_until
from tests.support.workers import exited

TTL_S = 1.0
ONE_TASK = [{"id": "a", "memberId": "m1", "task": "A"}]
SLACK_S = 1.0
"""Added to every upper bound on a delay: a loaded 2-core machine is slow to schedule."""


def run_in_thread(
    llm: ScriptedLLM, url: str, run_id: str, team: Path, *extra: str
) -> tuple[threading.Thread, list[Result]]:
    results: list[Result] = []
    thread = threading.Thread(
        target=lambda: results.append(run_cli(llm, url, run_id, team, *extra)), daemon=True
    )
    thread.start()
    return thread, results


@pytest.mark.realistic
def test_cancel_gives_up_on_a_member_stuck_in_a_model_call_after_the_grace(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    ttl_s = scaled(RunOptions().heartbeat_ttl_s, floor_s=TTL_S)
    grace_s = STOP_GRACE_TTLS * ttl_s
    # The reply comes well after the grace period is over, and after one more heartbeat
    # (every ttl/3), which is refused first.
    late_s = grace_s + ttl_s / 3 + 5
    conn = redis.Redis.from_url(workers, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    models = script_run(llm, run_id, ONE_TASK, member=[Slow("late answer", late_s)], synth=None)
    team = team_file(tmp_path / "t.toml", models, options={"heartbeat_ttl_s": ttl_s})
    thread, results = run_in_thread(llm, workers, run_id, team)
    wait_until(
        lambda: len(llm.requests[f"member-{run_id}"]) == 1, 60, message="the member's model call"
    )
    holder = board.get("a").worker

    cancel_started = time.monotonic()
    cancel = subprocess.run(
        [*TEAMCTL, "cancel", run_id, "--redis-url", workers],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cancel.returncode == 0 and "cancel requested" in cancel.stdout, cancel.stderr
    thread.join(grace_s + 60)
    ended_at = time.monotonic()
    answered_at = llm.request_times[f"member-{run_id}"][0] + late_s

    [result] = results
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["output"]) == ("cancelled", None)
    [a] = out["task_states"]
    assert (a["status"], a["error"], a["output"]) == ("failed", "cancelled", None)
    # The coordinator waited out the grace, and ended the run before the model answered.
    assert ended_at - cancel_started >= grace_s and ended_at < answered_at
    assert llm.prompts(f"synth-{run_id}") == []

    # The job's next heartbeat is refused (counted once; the worker's claim ends), then the
    # same job gets its late answer and tries to complete: refused, and counted too.
    wait_until(
        lambda: board.get("a").stale_writes >= 2,
        late_s + 30,
        message="the stuck member's late write",
    )
    assert time.monotonic() >= answered_at
    task = board.get("a")
    assert (task.status, task.error, task.output, task.token, task.worker, task.stale_writes) == (
        TaskStatus.FAILED,
        "cancelled",
        None,
        "0",
        holder,
        2,
    )
    types = [m.type for m in MessageBus(conn, RunKeys(run_id)).messages()]
    assert types.count("task.result") == 0 and types.count("run.cancelled") == 1


@pytest.mark.worker_failures_expected("RQ files each SIGKILLed job as failed")
def test_max_attempts_of_dead_claims_fail_the_task(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """Each attempt's job process is SIGKILLed mid-call (its rq worker survives and takes the
    next job); once max_attempts claims have expired the task fails."""
    conn = redis.Redis.from_url(workers, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    models = script_run(llm, run_id, ONE_TASK, member=lambda body: Slow("never delivered", 8))
    team = team_file(tmp_path / "t.toml", models, options={"heartbeat_ttl_s": TTL_S})
    thread, results = run_in_thread(llm, workers, run_id, team, "--max-attempts", "2")
    killed: list[int] = []
    try:
        for attempt in (1, 2):
            wait_until(
                lambda n=attempt: len(llm.requests[f"member-{run_id}"]) == n,
                60,
                message=f"attempt {attempt}'s model call",
            )
            task = board.get("a")
            assert task.attempts == attempt
            killed.append(int((task.worker or "").rsplit(":", 1)[1]))
            os.kill(killed[-1], signal.SIGKILL)
        thread.join(60)
    finally:
        for pid in killed:
            if not exited(pid):
                os.kill(pid, signal.SIGKILL)

    [result] = results
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "failed"
    [a] = out["task_states"]
    assert (a["status"], a["error"], a["attempts"]) == (
        "failed",
        "claim expired after 2 attempts",
        2,
    )
    assert len(killed) == len(set(killed)) == 2
    assert len(llm.requests[f"member-{run_id}"]) == 2  # no third claim
    errors = [
        m.content for m in MessageBus(conn, RunKeys(run_id)).messages() if m.type == "task.error"
    ]
    assert errors == ["claim expired after 2 attempts"]


def gaps_s(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


def test_model_retry_backoff_doubles_up_to_its_cap_then_gives_up(
    llm: ScriptedLLM, run_id: str
) -> None:
    failures: list[Any] = [
        HttpError(429),
        HttpError(500),
        HttpError(503),
        HttpError(529),
        HttpError(502),
        HttpError(504),
        HttpError(429),
    ]
    model = llm.script(f"m-{run_id}", failures)  # one more call would find it exhausted
    client = LitellmClient(provider_keys=(), max_retries=6, backoff_base_s=0.2, backoff_max_s=0.6)

    with pytest.raises(ModelError, match="scripted failure"):
        client.complete(model, [{"role": "user", "content": "hi"}], api_base=llm.api_base)

    times = llm.request_times[f"m-{run_id}"]
    assert len(times) == 7  # the first try and max_retries=6 retries, no more
    # Each wait is base * 2^n, capped, times a jitter of 0.5-1.0.
    nominal_s = [min(0.6, 0.2 * 2**n) for n in range(6)]
    for gap, nominal in zip(gaps_s(times), nominal_s, strict=True):
        assert nominal / 2 <= gap <= nominal + SLACK_S, (gaps_s(times), nominal_s)
    # Uncapped, the last wait would have been at least 0.2 * 2^5 / 2 = 3.2 s.
    assert gaps_s(times)[-1] < 3.2 - 0.5


def test_model_max_retries_bounds_the_runs_retries_with_the_default_backoff(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    planner = llm.script(f"plan-{run_id}", [HttpError(503), HttpError(429), HttpError(503)])
    team = team_file(tmp_path / "t.toml", {"planner": planner, "synth": planner, "member": planner})

    result = run_cli(llm, workers, run_id, team, "--model-max-retries", "2")

    assert result.exit_code == 1
    assert "planner failed" in result.stderr.strip().splitlines()[-1]
    times = llm.request_times[f"plan-{run_id}"]
    assert len(times) == 3
    first, second = gaps_s(times)  # LitellmClient's defaults: 0.5 s doubling, jitter 0.5-1.0
    assert 0.25 <= first <= 0.5 + SLACK_S and 0.5 <= second <= 1.0 + SLACK_S, (first, second)
