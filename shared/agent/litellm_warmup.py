"""litellm's first-call costs paid once, in a worker's preloading parent, not in every forked job.

A one-shot loopback HTTP server that answers one tool-calling completion walks its success path
(warm_up: a run's first model call needs it); a refused loopback port walks its error path
(warm_up_rest, with tiktoken's encoding). No thread is left running, so forking stays safe.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import socket
import threading
from typing import Any

from teamctl.shared.agent.llm import LitellmClient, describe_error

log = logging.getLogger(__name__)


_WARM_UP_REPLY = {
    "id": "warm-up",
    "object": "chat.completion",
    "created": 0,
    "model": "warm-up",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "warm",  # text too: its parsing compiles a regex
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def warm_up(litellm: Any) -> None:
    """Pay the first-call costs of litellm's success path once, in a preloading parent, not in
    every forked job: what a run's first model call (the planner's) goes through.

    litellm and the openai SDK import ~100 modules and build pydantic schemas lazily on the first
    call (~150 ms here); one call to a one-shot loopback server walks the success path, the
    reply's parsing and cost lookup included. No thread is left running, so forking stays safe.
    """
    threads = set(threading.enumerate())
    from openai.types.chat import ChatCompletion

    try:  # what the SDK itself runs on a reply (a private helper, hence the fallback)
        from openai._models import construct_type

        construct_type(value=_WARM_UP_REPLY, type_=ChatCompletion)
    except ImportError:
        ChatCompletion.model_validate(_WARM_UP_REPLY)
    try:
        _warm_success_path(litellm)
    except Exception as exc:  # a warm-up only: jobs then pay these costs themselves
        log.warning("litellm warm-up of a successful call failed: %s", describe_error(exc))
    _check_no_thread_left(threads)


def warm_up_rest(litellm: Any) -> None:
    """Pay the first-call costs a run's first model call does not need (~250 ms): litellm's
    error path, walked by a call to a refused loopback port, and tiktoken's encoding."""
    threads = set(threading.enumerate())
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound but never listening: the connect is refused at once
        port = closed.getsockname()[1]
        with contextlib.suppress(Exception):  # expected: connection refused
            litellm.completion(
                model="openai/teamctl-warm-up",
                messages=[{"role": "user", "content": "warm up"}],
                api_base=f"http://127.0.0.1:{port}/v1",
                api_key="warm-up",
                timeout=5,
                num_retries=0,
                max_retries=0,
            )
    # Calls that count tokens (the offline model's, among others) load tiktoken's encoding
    # lazily: ~0.13 s in every forked job otherwise. Loading it starts no thread. A private
    # helper, hence the guard: without it, jobs only pay that time again.
    with contextlib.suppress(Exception):
        litellm.main._get_encoding()
    _check_no_thread_left(threads)


def _check_no_thread_left(before: set[threading.Thread]) -> None:
    """Warn of threads the warm-up started and left (a running worker has its own already).
    By identity, not by count: another thread ending meanwhile would hide a new one."""
    left = set(threading.enumerate()) - before
    if left:
        log.warning(
            "litellm warm-up left %d threads running; forked jobs may inherit held locks",
            len(left),
        )


def warm_forked_job(litellm: Any) -> None:
    """In a process forked from a warmed-up parent, before its job: one successful call, which
    takes the copies of the parent's pages that the job's first model call would otherwise pay
    for (copy-on-write), while nothing waits on it."""
    _warm_success_path(litellm)


class _CannedReply(http.server.BaseHTTPRequestHandler):
    """Answers one chat completion with _WARM_UP_REPLY (HTTP/1.0: the connection then closes)."""

    def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps(_WARM_UP_REPLY).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet: the warm-up is not worth a log line."""


class _InlineExecutor:
    """Runs what litellm submits for logging at once: its success logging is warmed up too,
    and no logging thread is left in the parent."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


def _warm_success_path(litellm: Any) -> None:
    """One tool-calling completion through LitellmClient against a one-shot loopback server: the
    request, the reply's parsing and cost lookup (an unpriced model, as local ones are) and
    litellm's success logging, run inline; the server's thread ends before this returns."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _CannedReply)
    server.timeout = 5  # handle_request gives up if the call never comes
    thread = threading.Thread(target=server.handle_request, name="teamctl-warm-up", daemon=True)
    utils, executor = litellm.utils, litellm.utils.executor
    thread.start()
    try:
        utils.executor = _InlineExecutor()
        tool = {
            "type": "function",
            "function": {
                "name": "f",
                "description": "warm up",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        LitellmClient(provider_keys=(), timeout_s=5, max_retries=0).complete(
            "openai/teamctl-warm-up",
            [{"role": "user", "content": "warm up"}],
            tools=[tool],
            api_base=f"http://127.0.0.1:{server.server_port}/v1",
        )
    finally:
        utils.executor = executor
        thread.join(timeout=server.timeout + 1)
        server.server_close()
