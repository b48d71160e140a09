"""A scripted OpenAI-compatible chat server: tests program replies per model name.

It runs in the test process on a loopback port; workers reach it over real HTTP through litellm.
A script is a list of replies consumed in order, or a function of the request body. A reply is a
string (assistant text), a `ToolCalls`, or an `HttpError`. A script may take `latency_s` per reply,
spent outside the server's lock, so several slow calls are in flight at once as with a provider.
With `tls=True` it serves HTTPS with a self-signed certificate made at start (loopback only); a
client trusts it through `ca_file` (SSL_CERT_FILE for litellm), with verification on, as for a
provider.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class ToolCalls:
    """A turn that calls tools: [(name, arguments as a dict or a raw string)]."""

    calls: list[tuple[str, dict[str, Any] | str]]
    content: str | None = None


@dataclass
class HttpError:
    status: int
    message: str = "scripted failure"
    retry_after_s: float | None = None
    """Sent as a Retry-After header (a 429's "come back in N seconds")."""


@dataclass
class Headed:
    """A reply sent with extra HTTP headers: a provider's rate-limit headers."""

    reply: str | ToolCalls | HttpError
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Used:
    """A reply that reports this usage instead of the usual 11 prompt + 7 completion tokens:
    a provider counting more than the caller estimated."""

    reply: str | ToolCalls
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Slow:
    """A reply the server takes `latency_s` to send (on top of its script's latency)."""

    reply: str | ToolCalls | HttpError
    latency_s: float


@dataclass
class Held:
    """A reply the server sends only once the test sets `release`: a call that outlasts whatever
    the test does meanwhile, for exactly as long as it needs, instead of a guessed sleep."""

    reply: str | ToolCalls | HttpError
    release: threading.Event = field(default_factory=threading.Event)


def release_when(held: Held, ready: Callable[[], object], timeout_s: float = 120.0) -> None:
    """Release `held` from a background thread once `ready()` is true, for a test whose next
    step blocks (an in-process CLI call) until the held reply lands. Past `timeout_s` it is
    released anyway and the test's own assertions decide."""

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.02)
        held.release.set()

    threading.Thread(target=watch, daemon=True).start()


@dataclass
class Reset:
    """The connection is reset after part of the response (a provider or proxy that died)."""


@dataclass
class Stall:
    """Headers and part of the body, then nothing (a stalled provider): the client's timeout
    has to end the call."""


Reply = str | ToolCalls | HttpError | Slow | Held | Reset | Stall | Headed | Used
STALL_LIMIT_S = 120.0
"""A stalled reply gives up on its own after this long, so no server thread outlives a test."""
HOLD_LIMIT_S = 300.0
"""A held reply never released is sent after this long, and counted as a mistake."""
Handler = Callable[[dict[str, Any]], Reply]
CERT_DAYS = 2
"""A certificate made for one test session or benchmark run: a short life is plenty."""


@dataclass
class _Script:
    replies: list[Reply] = field(default_factory=list)
    handler: Handler | None = None
    repeat_last: bool = False
    latency_s: float = 0.0
    jitter: random.Random | None = None
    """With a seeded generator, each reply's latency is drawn from [latency_s/2, 3*latency_s/2]."""


class ScriptedLLM:
    """The server's state: scripts and every request received, per model."""

    def __init__(self, *, tls: bool = False) -> None:
        self.tls = tls
        self._tls_dir: tempfile.TemporaryDirectory[str] | None = None
        self._lock = threading.Lock()
        self._scripts: dict[str, _Script] = {}
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.request_times: dict[str, list[float]] = {}
        self.authorizations: dict[str, list[str | None]] = {}
        """The Authorization header of each request, per model: which key a worker sent."""
        self.server: ThreadingHTTPServer | None = None
        self.tls_errors: list[str] = []
        """Handshakes that failed (TLS mode), e.g. a client that refused the certificate."""
        self.mistakes: list[str] = []
        """Requests the scripts did not foresee: answered with an error the client may have
        retried silently, so each test checks there were none (tests/conftest.py)."""
        self._made: list[str] = []
        """Models scripted since the current test began."""

    @property
    def api_base(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        assert isinstance(host, str)
        return f"{'https' if self.tls else 'http'}://{host}:{port}/v1"

    @property
    def ca_file(self) -> Path:
        """The server's certificate (PEM), the one CA a client must trust (TLS mode only)."""
        assert self._tls_dir is not None, "ca_file exists once a tls=True server has started"
        return Path(self._tls_dir.name) / "cert.pem"

    def script(
        self,
        model: str,
        replies: list[Reply] | None = None,
        *,
        handler: Handler | None = None,
        repeat_last: bool = False,
        latency_s: float = 0.0,
        latency_seed: int | None = None,
    ) -> str:
        """Program `model`; returns the litellm model string ("openai/<model>")."""
        with self._lock:
            jitter = None if latency_seed is None else random.Random(latency_seed)
            self._scripts[model] = _Script(
                list(replies or []), handler, repeat_last, latency_s, jitter
            )
            self.requests[model] = []
            self.request_times[model] = []
            self.authorizations[model] = []
            self._made.append(model)
        return f"openai/{model}"

    def begin_test(self) -> None:
        with self._lock:
            self.mistakes.clear()
            self.tls_errors.clear()
            self._made.clear()

    def end_test(self) -> list[str]:
        """What went against the scripts in this test: unforeseen requests, unused replies."""
        with self._lock:
            unused = [
                f"script for {m!r} has {len(s.replies)} unused replies"
                for m in self._made
                if (s := self._scripts.get(m)) is not None
                and s.handler is None
                and not s.repeat_last
                and s.replies
            ]
            return [*self.mistakes, *unused]

    def prompts(self, model: str) -> list[str]:
        """The text of the last user message of each request to `model`."""
        return [_last_user_text(body) for body in self.requests.get(model, [])]

    def latency_s(self, body: dict[str, Any]) -> float:
        """How long the server takes before answering this request (its script's latency)."""
        with self._lock:
            script = self._scripts.get(body.get("model", ""))
            if script is None:
                return 0.0
            if script.jitter is None:
                return script.latency_s
            return script.latency_s * (0.5 + script.jitter.random())

    def next_reply(self, body: dict[str, Any], authorization: str | None = None) -> Reply:
        model = body.get("model", "")
        with self._lock:
            script = self._scripts.get(model)
            if script is None:
                self.mistakes.append(f"model {model!r} is not scripted")
                return HttpError(404, self.mistakes[-1])
            self.requests[model].append(body)
            self.request_times[model].append(time.monotonic())
            self.authorizations[model].append(authorization)
            if script.handler is not None:
                # Handlers run under the lock (they may keep state); one that raises answers
                # 500 with the error instead of dropping the connection.
                try:
                    return script.handler(body)
                except Exception as exc:
                    self.mistakes.append(f"scripted handler for {model!r} raised {exc!r}")
                    return HttpError(500, self.mistakes[-1])
            if not script.replies:
                self.mistakes.append(f"script for {model!r} is exhausted")
                return HttpError(500, self.mistakes[-1])
            if script.repeat_last and len(script.replies) == 1:
                return script.replies[0]
            return script.replies.pop(0)

    def hold(self, held: Held) -> str | ToolCalls | HttpError:
        """Wait, outside the lock, until the test releases `held`; then its reply."""
        if not held.release.wait(HOLD_LIMIT_S):
            with self._lock:
                self.mistakes.append(f"a held reply was never released: {held.reply!r}")
        return held.reply

    def start(self) -> None:
        state = self
        server_tls = self._server_tls_context() if self.tls else None

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # else every call costs ~40 ms of delayed ACK
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                # The handshake runs here, in the connection's own thread, so a slow or failed
                # one never holds up the accept loop.
                if server_tls is not None:
                    self.request = server_tls.wrap_socket(self.request, server_side=True)
                super().setup()

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = state.next_reply(body, self.headers.get("Authorization"))
                delay_s = state.latency_s(body)
                if isinstance(reply, Slow):
                    delay_s += reply.latency_s
                    reply = reply.reply
                if isinstance(reply, Held):
                    reply = state.hold(reply)
                extra, reply = _headers_of(reply)
                usage = (
                    (reply.prompt_tokens, reply.completion_tokens)
                    if isinstance(reply, Used)
                    else (11, 7)
                )
                reply = reply.reply if isinstance(reply, Used) else reply
                # A provider's thinking time, spent outside the lock: other calls go on meanwhile.
                time.sleep(delay_s)
                if isinstance(reply, Reset | Stall):
                    self._break(reply)
                    return
                status, payload = _render(reply, body.get("model", ""), usage)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if isinstance(reply, HttpError) and reply.retry_after_s is not None:
                    self.send_header("Retry-After", f"{reply.retry_after_s:g}")
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

            def _break(self, reply: Reset | Stall) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"id": "chatcmpl-scripted", "object": ')
                self.wfile.flush()
                if isinstance(reply, Stall):
                    # Until the client gives up (the socket turns readable at its close).
                    self.connection.settimeout(STALL_LIMIT_S)
                    with contextlib.suppress(OSError):
                        self.connection.recv(1)
                # SO_LINGER 0: the close sends a reset, not an orderly end of stream.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # A failed handshake is a client's verdict on the certificate: recorded for the
                # test to check, not printed as a server error.
                error = sys.exc_info()[1]
                if isinstance(error, ssl.SSLError):
                    with state._lock:
                        state.tls_errors.append(error.reason or str(error))
                    return
                # A client that hung up before its answer (a killed worker, a call that timed
                # out) is what many tests do on purpose. Printed, the traceback would land in
                # whichever test's captured stderr is current and fail its output check.
                if isinstance(error, BrokenPipeError | ConnectionResetError):
                    return
                super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self._tls_dir is not None:
            self._tls_dir.cleanup()

    def _server_tls_context(self) -> ssl.SSLContext:
        """A server context with a fresh self-signed certificate for 127.0.0.1."""
        self._tls_dir = tempfile.TemporaryDirectory(prefix="scripted-llm-tls-")
        key = Path(self._tls_dir.name) / "key.pem"
        self_signed_cert(self.ca_file, key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, key)
        return context


def self_signed_cert(cert: Path, key: Path) -> None:
    """Write a self-signed P-256 certificate for IP 127.0.0.1 and its key, with `openssl req`
    (the `cryptography` package is not a dependency). It is its own CA, so a client that trusts
    it verifies the server's chain and name as it would a provider's."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("TLS mode needs the openssl command: install openssl")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            str(CERT_DAYS),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,digitalSignature,keyCertSign",
            "-addext",
            "extendedKeyUsage=serverAuth",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _headers_of(reply: Reply) -> tuple[dict[str, str], Reply]:
    """A Headed reply's extra headers and the reply itself (others: none)."""
    if isinstance(reply, Headed):
        return reply.headers, reply.reply
    return {}, reply


def _last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content", "") if users else ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content


def _render(
    reply: Reply, model: str, usage: tuple[int, int] = (11, 7)
) -> tuple[int, dict[str, Any]]:
    if isinstance(reply, HttpError):
        return reply.status, {
            "error": {"message": reply.message, "type": "scripted", "code": str(reply.status)}
        }
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    if isinstance(reply, ToolCalls):
        message["content"] = reply.content
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(reply.calls)
        ]
        finish = "tool_calls"
    else:
        message["content"] = reply
    return 200, {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }
