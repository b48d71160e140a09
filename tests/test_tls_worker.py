"""The documented preloaded forking worker reaches a model over HTTPS with certificate verification
on: it trusts the CA named by SSL_CERT_FILE (as litellm reads it), and refuses a server it was not
told to trust. Providers are HTTPS; these keep that path from rotting unseen."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue
from teamctl.coordinator.cli.local_workers import worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.models import TaskSpec, TaskState, TaskStatus

from tests.scripted_llm import ScriptedLLM
from tests.test_worker_support import make_run

WORKER_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def tls_llm() -> Iterator[ScriptedLLM]:
    """The scripted model server over HTTPS, with a self-signed certificate of its own."""
    server = ScriptedLLM(tls=True)
    server.start()
    yield server
    server.stop()


def run_one_task(redis_server: str, tls_llm: ScriptedLLM, model: str, workspace: Path,
                 ca_file: Path | None) -> TaskState:
    """One run_task job on a fresh queue, run by a preloaded forking worker in --burst mode (it
    exits once the queue is empty), with SSL_CERT_FILE set to `ca_file` or unset."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run_id = f"tls-{uuid.uuid4().hex[:10]}"
    make_run(conn, run_id, models={"m1": model},
             tasks=[TaskSpec(id="t1", member_id="m1", task="Say hello")],
             workspace=workspace, api_base=tls_llm.api_base, model_max_retries=0)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    Queue(queue, connection=redis.Redis.from_url(redis_server)).enqueue(
        "teamctl.worker.jobs.run_task", run_id, "t1", job_timeout=WORKER_TIMEOUT_S)
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_VERIFY")}
    if ca_file is not None:
        env["SSL_CERT_FILE"] = str(ca_file)

    done = subprocess.run([*worker_command(redis_server, [queue]), "--burst"],
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env)

    assert done.returncode == 0, done.stdout + done.stderr
    task = TaskBoard(conn, RunKeys(run_id)).get("t1")
    assert task is not None
    return task


def test_a_forked_job_completes_a_task_against_a_verified_https_model(
        redis_server: str, tls_llm: ScriptedLLM, tmp_path: Path) -> None:
    tls_llm.begin_test()
    model = tls_llm.script(f"tls-{uuid.uuid4().hex[:6]}", ["hello over TLS"])

    task = run_one_task(redis_server, tls_llm, model, tmp_path / "ws", tls_llm.ca_file)

    assert tls_llm.api_base.startswith("https://127.0.0.1:")
    assert (task.status, task.output) == (TaskStatus.COMPLETED, "hello over TLS")
    assert tls_llm.prompts(model.removeprefix("openai/"))[0].strip()
    assert tls_llm.end_test() == [] and tls_llm.tls_errors == []


def test_a_worker_that_does_not_trust_the_certificate_fails_the_task(
        redis_server: str, tls_llm: ScriptedLLM, tmp_path: Path) -> None:
    """Verification is on: without the CA, the handshake fails and no request is ever sent."""
    tls_llm.begin_test()
    model = tls_llm.script(f"tls-{uuid.uuid4().hex[:6]}", ["never sent"])

    task = run_one_task(redis_server, tls_llm, model, tmp_path / "ws", ca_file=None)

    assert task.status == TaskStatus.FAILED
    assert "Connection error" in (task.error or ""), task.error
    # The client refused the server's certificate (an unknown CA) during the handshake.
    assert tls_llm.tls_errors == ["TLSV1_ALERT_UNKNOWN_CA"]
    assert tls_llm.requests[model.removeprefix("openai/")] == []
