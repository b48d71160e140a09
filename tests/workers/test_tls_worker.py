"""The documented preloaded forking worker reaches a model over HTTPS with certificate verification
on: it trusts the CA named by SSL_CERT_FILE (as litellm reads it), and refuses a server it was not
told to trust. Providers are HTTPS; these keep that path from rotting unseen."""

from __future__ import annotations

import os
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import pytest
import redis
from rq import Queue
from rq.job import Job
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskState, TaskStatus

from tests.support.llm import ScriptedLLM
from tests.support.runs import make_run

WORKER_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def tls_llm() -> Iterator[ScriptedLLM]:
    """The scripted model server over HTTPS, with a self-signed certificate of its own."""
    server = ScriptedLLM(tls=True)
    server.start()
    yield server
    server.stop()


def run_burst_worker(redis_server: str, queue: str, ca_file: Path | None) -> None:
    """A preloaded forking worker on `queue` in --burst mode (it exits once the queue is empty),
    with SSL_CERT_FILE set to `ca_file` or unset."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_VERIFY")}
    if ca_file is not None:
        env["SSL_CERT_FILE"] = str(ca_file)
    done = subprocess.run(
        [*worker_command(redis_server, [queue]), "--burst"],
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(autouse=True)
def tls_checked(tls_llm: ScriptedLLM) -> Iterator[None]:
    """The HTTPS server under the check the plain one gets in every test (conftest's llm): a
    request its scripts did not foresee, or a reply left unused, fails the test."""
    tls_llm.begin_test()
    yield
    problems = tls_llm.end_test()
    assert not problems, "the HTTPS model server was not used as scripted: " + "; ".join(problems)


def run_one_task(
    redis_server: str, tls_llm: ScriptedLLM, model: str, workspace: Path, ca_file: Path | None
) -> TaskState:
    """One run_task job on a fresh queue, run by a preloaded forking worker (run_burst_worker)."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run_id = f"tls-{uuid.uuid4().hex[:10]}"
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[TaskSpec(id="t1", member_id="m1", task="Say hello")],
        workspace=workspace,
        api_base=tls_llm.api_base,
        model_max_retries=0,
    )
    queue = f"q-{uuid.uuid4().hex[:8]}"
    Queue(queue, connection=redis.Redis.from_url(redis_server)).enqueue(
        "teamctl.worker.jobs.run_task", run_id, "t1", job_timeout=WORKER_TIMEOUT_S
    )
    run_burst_worker(redis_server, queue, ca_file)
    task = TaskBoard(conn, RunKeys(run_id)).get("t1")
    assert task is not None
    return task


def test_a_forked_job_completes_a_task_against_a_verified_https_model(
    redis_server: str, tls_llm: ScriptedLLM, tmp_path: Path
) -> None:
    model = tls_llm.script(f"tls-{uuid.uuid4().hex[:6]}", ["hello over TLS"])

    task = run_one_task(redis_server, tls_llm, model, tmp_path / "ws", tls_llm.ca_file)

    assert tls_llm.api_base.startswith("https://127.0.0.1:")
    assert (task.status, task.output) == (TaskStatus.COMPLETED, "hello over TLS")
    assert tls_llm.prompts(model.removeprefix("openai/"))[0].strip()
    assert tls_llm.tls_errors == []


def test_a_worker_that_does_not_trust_the_certificate_fails_the_task(
    redis_server: str, tls_llm: ScriptedLLM, tmp_path: Path
) -> None:
    """Verification is on: without the CA, the handshake fails and no request is ever sent."""
    # repeat_last: the reply is there should a request come, and none must.
    model = tls_llm.script(f"tls-{uuid.uuid4().hex[:6]}", ["never sent"], repeat_last=True)

    task = run_one_task(redis_server, tls_llm, model, tmp_path / "ws", ca_file=None)

    assert task.status == TaskStatus.FAILED
    # The task says why (litellm's own message is only "Connection error."), and the server saw
    # the client refuse its certificate (an unknown CA) during the handshake.
    assert "CERTIFICATE_VERIFY_FAILED" in (task.error or ""), task.error
    assert tls_llm.tls_errors == ["TLSV1_ALERT_UNKNOWN_CA"]
    assert tls_llm.requests[model.removeprefix("openai/")] == []


def https_call_counting_ca_loads(model: str, api_base: str) -> dict[str, Any]:
    """A job: one model call over HTTPS, counting the CA files loaded into SSL contexts meanwhile
    (the count is all the job changes: the call itself runs unaltered)."""
    loads: list[str] = []
    load_verify_locations = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(str(args[0] if args else kwargs.get("cafile")))
        load_verify_locations(self, *args, **kwargs)

    ssl.SSLContext.load_verify_locations = counted  # type: ignore[method-assign]
    try:
        reply = LitellmClient(provider_keys=(), max_retries=0).complete(
            model, [{"role": "user", "content": "hello"}], api_base=api_base
        )
    finally:
        ssl.SSLContext.load_verify_locations = load_verify_locations  # type: ignore[method-assign]
    return {"content": reply.content, "ca_loads": loads}


def test_a_forked_job_uses_the_ssl_context_its_worker_built_at_warm_up(
    redis_server: str, tls_llm: ScriptedLLM, tmp_path: Path
) -> None:
    """Loading a provider-sized CA bundle into a fresh context costs a forked job ~40 ms here;
    the worker's warm-up builds litellm's context once, keyed by the CA file, and jobs inherit
    it. A job that loads CA files again has lost that (e.g. litellm's client path changed)."""
    model = tls_llm.script(f"tls-{uuid.uuid4().hex[:6]}", ["inherited"])
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_text(Path(certifi.where()).read_text() + tls_llm.ca_file.read_text())
    queue = f"q-{uuid.uuid4().hex[:8]}"
    job = Queue(queue, connection=redis.Redis.from_url(redis_server)).enqueue(
        https_call_counting_ca_loads, model, tls_llm.api_base, job_timeout=WORKER_TIMEOUT_S
    )

    run_burst_worker(redis_server, queue, bundle)

    done = Job.fetch(job.id, connection=redis.Redis.from_url(redis_server))
    assert done.get_status() == "finished", done.latest_result()
    assert done.return_value() == {"content": "inherited", "ca_loads": []}
    assert tls_llm.tls_errors == []
