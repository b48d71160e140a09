"""The model client: its own retries (timeouts, 429) over real HTTP, credentials failures
that are never retried, and the preload warm-up."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from teamctl.shared.agent.litellm_warmup import warm_up, warm_up_rest
from teamctl.shared.agent.llm import (
    LitellmClient,
    credential_vars,
    credentials_error,
    load_litellm,
)
from teamctl.shared.errors import CredentialsError, ModelError

from tests.support.cli import errors, run_cli
from tests.support.llm import HttpError, Reset, ScriptedLLM, Stall
from tests.support.replies import script_run
from tests.support.teamfile import team_file

HI = [{"role": "user", "content": "hi"}]
KEY = "sk-test-4b1d9c0e7f"
"""A provider key the tests set: workers send it, and no error message may show it."""
IN_WORKERS = (
    "in the environment of the workers (workers make every model call and read it when they start)"
)


def test_429_and_a_timeout_are_retried(llm: ScriptedLLM, run_id: str) -> None:
    calls: list[float] = []

    def slow_then_limited_then_fine(body: dict[str, Any]) -> str | HttpError:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(0.6)  # longer than the client's timeout: the client gives up first
            return "too late"
        return HttpError(429, "slow down") if len(calls) == 2 else "fine"

    model = llm.script(f"m-{run_id}", handler=slow_then_limited_then_fine)
    # The scripted server answers one request at a time: the backoff outlasts the slow reply.
    # One spare retry, in case a loaded machine makes a retry also wait out the slow reply.
    client = LitellmClient(provider_keys=(), timeout_s=0.4, max_retries=3, backoff_base_s=0.3)

    reply = client.complete(model, HI, api_base=llm.api_base)

    assert reply.content == "fine" and len(calls) == 3
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 7)
    assert reply.usage.unpriced


def test_a_429_with_retry_after_waits_as_long_as_the_provider_asks(
    llm: ScriptedLLM, run_id: str
) -> None:
    model = llm.script(f"m-{run_id}", [HttpError(429, "slow down", retry_after_s=1.5), "fine"])
    client = LitellmClient(provider_keys=(), max_retries=2, backoff_base_s=0.01)

    reply = client.complete(model, HI, api_base=llm.api_base)

    first, second = llm.request_times[f"m-{run_id}"]
    assert reply.content == "fine" and second - first >= 1.5


def test_a_reset_connection_and_a_stalled_reply_are_retried(llm: ScriptedLLM, run_id: str) -> None:
    model = llm.script(f"m-{run_id}", [Reset(), Stall(), "fine"])
    client = LitellmClient(provider_keys=(), timeout_s=1.0, max_retries=2, backoff_base_s=0.01)

    reply = client.complete(model, HI, api_base=llm.api_base)

    assert reply.content == "fine" and len(llm.requests[f"m-{run_id}"]) == 3


def test_a_400_is_not_retried(llm: ScriptedLLM, run_id: str) -> None:
    model = llm.script(f"m-{run_id}", [HttpError(400, "bad request 91c")])  # a retry: exhausted
    client = LitellmClient(provider_keys=(), max_retries=3, backoff_base_s=0.01)

    with pytest.raises(ModelError, match="bad request 91c"):
        client.complete(model, HI, api_base=llm.api_base)
    assert len(llm.requests[f"m-{run_id}"]) == 1


def test_a_network_failure_names_its_cause_and_an_error_reply_does_not_repeat_its_url(
    llm: ScriptedLLM, run_id: str
) -> None:
    """litellm says only "Connection error." for a refused connection (or certificate); the
    cause and the address are what tell a user what to fix (its password masked). An HTTP
    error reply already says what went wrong."""
    client = LitellmClient(provider_keys=(), max_retries=0)
    with socket.socket() as closed:  # bound, never listening: the connection is refused
        closed.bind(("127.0.0.1", 0))
        where = f"127.0.0.1:{closed.getsockname()[1]}/v1"
        with pytest.raises(ModelError) as refused:
            client.complete("openai/nowhere", HI, api_base=f"http://u:s3cret@{where}?key=k3y")
    assert str(refused.value).endswith(f"Connection refused, at http://{where})")
    assert "s3cret" not in str(refused.value) and "k3y" not in str(refused.value)
    model = llm.script(f"m-{run_id}", [HttpError(500, "boom 5e1")])

    with pytest.raises(ModelError) as failed:
        client.complete(model, HI, api_base=llm.api_base)
    assert "boom 5e1" in str(failed.value) and llm.api_base not in str(failed.value)


def test_warm_up_starts_no_thread_so_forking_stays_safe(caplog: pytest.LogCaptureFixture) -> None:
    """Nor does it warn of a thread it did not start: a running worker has its own."""
    done = threading.Event()
    already = threading.Thread(target=done.wait, daemon=True)
    already.start()
    try:
        # Threads of earlier tests in this process may end meanwhile: only new ones count.
        before = set(threading.enumerate())
        warm_up(load_litellm())
        warm_up_rest(load_litellm())
        assert set(threading.enumerate()) - before == set()
    finally:
        done.set()
        already.join()
    assert "threads running" not in caplog.text


def test_warm_up_warns_of_a_thread_it_left_though_another_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A thread of the worker's ending during the warm-up does not hide one the warm-up left."""
    release, stay = threading.Event(), threading.Event()
    ending = threading.Thread(target=release.wait, daemon=True)
    ending.start()

    def completion(**_: Any) -> None:
        # litellm stands in here: only the warm-up's own check is under test.
        threading.Thread(target=stay.wait, daemon=True).start()
        release.set()
        ending.join()
        raise ConnectionError("refused")

    litellm = SimpleNamespace(completion=completion, main=SimpleNamespace(_get_encoding=dict))
    try:
        with caplog.at_level(logging.WARNING):
            warm_up_rest(litellm)
    finally:
        stay.set()
    assert "left 1 threads running" in caplog.text


def test_a_rejected_key_is_not_retried_and_the_error_names_its_variable_not_its_value(
    llm: ScriptedLLM, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    model = llm.script(
        f"m-{run_id}",
        [HttpError(401, f"Incorrect API key provided: {KEY}.\nYou can find your API key online.")],
    )
    client = LitellmClient(provider_keys={"OPENAI_API_KEY"}, max_retries=3, backoff_base_s=0.01)

    with pytest.raises(CredentialsError) as failed:
        client.complete(model, HI, api_base=llm.api_base)

    assert llm.authorizations[f"m-{run_id}"] == [f"Bearer {KEY}"]  # one request, with the key
    assert str(failed.value) == (
        f"model {model}: the provider rejected OPENAI_API_KEY (401: Incorrect API key provided: "
        f"<OPENAI_API_KEY>. You can find your API key online.): set a valid key {IN_WORKERS}"
    )


def test_a_403_is_not_retried_and_its_reason_reaches_the_error_on_one_line(
    llm: ScriptedLLM, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    reason = "Project has no access to \x1b[31mgpt-x\x1b[0m\r\nin this region"
    model = llm.script(f"m-{run_id}", [HttpError(403, reason)])
    client = LitellmClient(provider_keys={"OPENAI_API_KEY"}, max_retries=3, backoff_base_s=0.01)

    with pytest.raises(CredentialsError) as failed:
        client.complete(model, HI, api_base=llm.api_base)

    assert len(llm.requests[f"m-{run_id}"]) == 1
    assert str(failed.value) == (
        f"model {model}: the provider denied OPENAI_API_KEY access (403: Project has no access "
        f"to gpt-x in this region): set credentials allowed to use this model {IN_WORKERS}"
    )


def test_a_401_to_a_request_sent_without_a_key_says_the_key_is_missing(
    llm: ScriptedLLM, run_id: str
) -> None:
    """With an API base and no key set, teamctl sends a placeholder: a refusal means no key."""
    model = llm.script(f"m-{run_id}", [HttpError(401, "You didn't provide an API key.")])
    client = LitellmClient(provider_keys=(), max_retries=3, backoff_base_s=0.01)

    with pytest.raises(CredentialsError) as failed:
        client.complete(model, HI, api_base=llm.api_base)

    assert llm.authorizations[f"m-{run_id}"] == ["Bearer teamctl-no-key"]
    assert str(failed.value) == (
        f"model {model}: missing credentials (the server answered 401: You didn't provide an "
        f"API key.): set OPENAI_API_KEY {IN_WORKERS}"
    )


def test_a_500_saying_credentials_are_missing_is_not_retried(llm: ScriptedLLM, run_id: str) -> None:
    """The openai SDK's own "Missing credentials" reaches teamctl from litellm as a 500."""
    model = llm.script(
        f"m-{run_id}",
        [
            HttpError(
                500,
                (
                    "Missing credentials. Please pass an `api_key`, `workload_identity`, "
                    "`admin_api_key`, "
                    "or set the `OPENAI_API_KEY` or `OPENAI_ADMIN_KEY` environment variable."
                ),
            )
        ],
    )
    client = LitellmClient(provider_keys=(), max_retries=3, backoff_base_s=0.01)

    with pytest.raises(CredentialsError) as failed:
        client.complete(model, HI, api_base=llm.api_base)

    assert len(llm.requests[f"m-{run_id}"]) == 1
    assert str(failed.value) == (
        f"model {model}: missing credentials: set OPENAI_API_KEY {IN_WORKERS}"
    )


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),  # the openai SDK refuses: a 500 through litellm
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),  # litellm refuses: a 401
        ("gemini/gemini-1.5-flash", "GEMINI_API_KEY"),  # a 500 whose text carries a traceback
        ("azure/gpt-4o", "AZURE_API_KEY"),
    ],
)
def test_a_missing_key_fails_at_once_without_a_request(
    model: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key and no API base: litellm refuses before connecting, and teamctl does not retry."""
    litellm = load_litellm()
    calls, connections = [], []
    completion = litellm.completion
    monkeypatch.setattr(litellm, "completion", lambda **kw: calls.append(kw) or completion(**kw))

    def no_network(*args: Any, **kwargs: Any) -> Any:
        connections.append(args)
        raise OSError("this test allows no network")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    client = LitellmClient(provider_keys=(), max_retries=3, backoff_base_s=0.01)

    with pytest.raises(CredentialsError) as failed:
        client.complete(model, HI)

    assert (len(calls), connections) == (1, [])
    assert str(failed.value) == f"model {model}: missing credentials: set {variable} {IN_WORKERS}"


def test_providers_without_one_api_key_name_the_credentials_litellm_reads() -> None:
    litellm = load_litellm()
    aws = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    assert credential_vars(litellm, "bedrock/anthropic.claude-3-haiku-20240307-v1:0") == aws
    assert credential_vars(litellm, "sagemaker/my-endpoint") == aws
    assert credential_vars(litellm, "vertex_ai/gemini-1.5-flash") == (
        "GOOGLE_APPLICATION_CREDENTIALS",
    )
    assert credential_vars(litellm, "azure/my-deployment") == ("AZURE_API_KEY",)
    # What botocore says through litellm when it finds no AWS credentials (a 401).
    no_aws = litellm.AuthenticationError(
        message="BedrockException Invalid Authentication - Unable to locate credentials",
        llm_provider="bedrock",
        model="anthropic.claude-3-haiku-20240307-v1:0",
    )
    error = credentials_error(litellm, "bedrock/anthropic.claude-3-haiku-20240307-v1:0", no_aws)
    assert str(error) == (
        "model bedrock/anthropic.claude-3-haiku-20240307-v1:0: missing credentials: set "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment of the workers (workers "
        "make every model call and read them when they start)"
    )
    # Providers whose requests go out without a key when none is set: their 401 means unset.
    unauthorized = litellm.AuthenticationError(
        message="DeepseekException - Unauthorized", llm_provider="deepseek", model="deepseek-chat"
    )
    assert str(credentials_error(litellm, "deepseek/deepseek-chat", unauthorized)) == (
        f"model deepseek/deepseek-chat: missing credentials (the server answered 401: "
        f"Unauthorized): set DEEPSEEK_API_KEY {IN_WORKERS}"
    )
    overloaded = litellm.InternalServerError(message="overloaded", llm_provider="openai", model="x")
    assert credentials_error(litellm, "openai/x", overloaded) is None


def one_line_naming_the_key(error: str, prefix: str) -> None:
    """`error` is one credentials message: it says which variable to set, and where."""
    assert error.startswith(prefix) and "\n" not in error, error
    assert "OPENAI_API_KEY" in error and IN_WORKERS in error, error


def test_a_refused_planner_call_fails_the_run_with_the_one_line_error(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    planner = llm.script(f"plan-{run_id}", [HttpError(401, "no such key")])  # once, no retry
    team = team_file(tmp_path / "t.toml", {"planner": planner, "synth": planner, "member": planner})

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 1, result.output
    one_line_naming_the_key(
        result.stderr.strip().splitlines()[-1].split("planner failed: ")[-1], f"model {planner}: "
    )


def test_a_refused_member_call_is_the_tasks_error(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = script_run(
        llm,
        run_id,
        [{"id": "a", "memberId": "m1", "task": "A"}],
        member=[HttpError(401, "no such key")],
    )

    result = run_cli(llm, workers, run_id, team_file(tmp_path / "t.toml", models))

    assert result.exit_code == 1, result.output
    one_line_naming_the_key(errors(json.loads(result.stdout))["a"], f"model {models['member']}: ")
    assert len(llm.requests[f"member-{run_id}"]) == 1
