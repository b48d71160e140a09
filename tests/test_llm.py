"""The model client: its own retries (timeouts, 429) over real HTTP, and the preload warm-up."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
from teamctl.shared.agent.llm import ModelClient, load_litellm, warm_up
from teamctl.shared.errors import ModelError

from tests.scripted_llm import HttpError, Reset, ScriptedLLM, Stall

HI = [{"role": "user", "content": "hi"}]


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
    client = ModelClient(provider_keys=(), timeout_s=0.4, max_retries=3, backoff_base_s=0.3)

    reply = client.complete(model, HI, api_base=llm.api_base)

    assert reply.content == "fine" and len(calls) == 3
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 7)
    assert reply.usage.unpriced


def test_a_429_with_retry_after_waits_as_long_as_the_provider_asks(
        llm: ScriptedLLM, run_id: str) -> None:
    model = llm.script(f"m-{run_id}", [HttpError(429, "slow down", retry_after_s=1.5), "fine"])
    client = ModelClient(provider_keys=(), max_retries=2, backoff_base_s=0.01)

    reply = client.complete(model, HI, api_base=llm.api_base)

    first, second = llm.request_times[f"m-{run_id}"]
    assert reply.content == "fine" and second - first >= 1.5


def test_a_reset_connection_and_a_stalled_reply_are_retried(
        llm: ScriptedLLM, run_id: str) -> None:
    model = llm.script(f"m-{run_id}", [Reset(), Stall(), "fine"])
    client = ModelClient(provider_keys=(), timeout_s=1.0, max_retries=2, backoff_base_s=0.01)

    reply = client.complete(model, HI, api_base=llm.api_base)

    assert reply.content == "fine" and len(llm.requests[f"m-{run_id}"]) == 3


def test_a_400_is_not_retried(llm: ScriptedLLM, run_id: str) -> None:
    model = llm.script(f"m-{run_id}", [HttpError(400, "bad request 91c")])  # a retry: exhausted
    client = ModelClient(provider_keys=(), max_retries=3, backoff_base_s=0.01)

    with pytest.raises(ModelError, match="bad request 91c"):
        client.complete(model, HI, api_base=llm.api_base)
    assert len(llm.requests[f"m-{run_id}"]) == 1


def test_a_network_failure_names_its_cause_and_an_error_reply_does_not_repeat_its_url(
        llm: ScriptedLLM, run_id: str) -> None:
    """litellm says only "Connection error." for a refused connection (or certificate); the
    cause is what tells a user what to fix. An HTTP error reply already says what went wrong."""
    client = ModelClient(provider_keys=(), max_retries=0)
    with socket.socket() as closed:  # bound, never listening: the connection is refused
        closed.bind(("127.0.0.1", 0))
        with pytest.raises(ModelError, match="Connection refused"):
            client.complete("openai/nowhere", HI,
                            api_base=f"http://127.0.0.1:{closed.getsockname()[1]}/v1")
    model = llm.script(f"m-{run_id}", [HttpError(500, "boom 5e1")])

    with pytest.raises(ModelError) as failed:
        client.complete(model, HI, api_base=llm.api_base)
    assert "boom 5e1" in str(failed.value) and llm.api_base not in str(failed.value)


def test_warm_up_starts_no_thread_so_forking_stays_safe() -> None:
    before = threading.active_count()
    warm_up(load_litellm())
    assert threading.active_count() == before
