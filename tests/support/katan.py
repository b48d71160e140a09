"""llm-katan, a third-party test server that speaks each provider family's own API (Anthropic's
Messages, Azure OpenAI's deployments, Bedrock's Converse and InvokeModel, Gemini's
generateContent, OpenAI's chat completions) from an echo backend, in a process of its own.

What its echo backend does, as read in llm-katan 0.22.0's source (tests rely on it):
- Text: "[echo] model=... \\nUser: <the last user message>", token counts are word counts.
- Tools: whenever a request carries tools, the reply calls the FIRST tool with arguments made
  from its JSON schema ("test_<name>" for strings, 1, 1.0, true, [], {}), every time, also after
  a tool result (Azure's and Bedrock's such replies have no text). `--no-auto-tool-providers`
  turns that off per provider, so an agent loop can end with an answer.
- Failures (per server, counted over its requests): `--rate-limit-after N` answers 429 from
  request N+1 on, `--timeout-after N` 504, `--max-inflight N` 503 past N concurrent requests,
  `--error-rate P` 500 at random, `--latency-ms` delays every reply. No failure reply carries a
  Retry-After header, and no reply carries rate-limit headers.
- Auth: each route refuses a request without its provider's header (x-api-key, api-key or a
  Bearer token, a SigV4 or Bearer Authorization, Authorization or ?key=); `--validate-keys`
  also checks the values (llm_katan.config.DEFAULT_API_KEYS; for SigV4 the access key id).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.support.waiting import wait_until
from tests.support.web import free_port

FAMILIES = ("openai", "anthropic", "azure_openai", "bedrock", "vertexai")
"""llm-katan's names of the APIs it can serve; every one is enabled unless a test says less."""
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
PORT_ATTEMPTS = 3
"""A free port can be taken between the probe and the server's bind: try another."""


@dataclass
class Katan:
    """A running llm-katan: its base URL (no path), process and log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def requests(self) -> dict[str, int]:
        """Requests received per provider family, failures included (its /stats counters)."""
        answer = httpx.get(f"{self.url}/stats", timeout=10)
        answer.raise_for_status()
        return dict(answer.json()["providers"])

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def llm_katan(
    workdir: Path, *options: str, families: tuple[str, ...] = FAMILIES, model: str = "katan-echo"
) -> Iterator[Katan]:
    """llm-katan's echo backend on a free loopback port with `options` (its CLI flags), ready
    (its /health answers) before this yields; stopped by its pid after."""
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(PORT_ATTEMPTS):
        katan = _start(workdir, attempt, options, families, model)
        try:
            if _ready(katan):
                break
        except BaseException:
            _stop(katan)
            raise
        _stop(katan)
    else:
        raise AssertionError(f"llm-katan did not start:\n{katan.log_text()[-2000:]}")
    try:
        yield katan
    finally:
        _stop(katan)


def _start(
    workdir: Path, attempt: int, options: tuple[str, ...], families: tuple[str, ...], model: str
) -> Katan:
    """One llm-katan process (its own stats file: the default is in the home directory)."""
    port = free_port()
    log = workdir / f"llm-katan-{attempt}.log"
    command = [
        sys.executable,
        "-m",
        "llm_katan.cli",
        "--model",
        model,
        "--backend",
        "echo",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--providers",
        ",".join(families),
        "--stats-file",
        str(workdir / f"stats-{attempt}.json"),
        *options,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ},
        )
    return Katan(url=f"http://127.0.0.1:{port}", process=process, log=log)


def _ready(katan: Katan) -> bool:
    """True once /health answers; False if the process ended first (its port was taken)."""

    def answered_or_ended() -> bool:
        if katan.process.poll() is not None:
            return True
        try:
            return httpx.get(f"{katan.url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(answered_or_ended, START_TIMEOUT_S, message=f"llm-katan at {katan.url}")
    return katan.process.poll() is None


def _stop(katan: Katan) -> None:
    """SIGTERM by pid (uvicorn shuts down), SIGKILL by pid if it lingers."""
    if katan.process.poll() is None:
        os.kill(katan.process.pid, signal.SIGTERM)
        try:
            katan.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(katan.process.pid, signal.SIGKILL)
            katan.process.wait(STOP_TIMEOUT_S)


LIMIT_HEADERS = {
    "retry-after": "2",
    "retry-after-ms": "1500",
    "x-ratelimit-limit-requests": "100",
    "x-ratelimit-remaining-requests": "99",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-limit-tokens": "1000",
    "x-ratelimit-remaining-tokens": "900",
    "x-ratelimit-reset-tokens": "6m0s",
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2026-12-06T07:00:00Z",
    "anthropic-ratelimit-tokens-limit": "8000",
    "anthropic-ratelimit-tokens-remaining": "7000",
}
"""Every rate-limit header a family's provider may send (OpenAI's and Azure's x-ratelimit-*,
Anthropic's anthropic-ratelimit-*, Retry-After and retry-after-ms): llm-katan sends none."""


@contextmanager
def with_limit_headers(target: str) -> Iterator[str]:
    """A loopback proxy in front of llm-katan at `target` that adds LIMIT_HEADERS to each of its
    replies, success or failure; yields its base URL. Stopped (and its thread joined) after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _forwarding_to(target))
    thread = threading.Thread(target=server.serve_forever, name="limit-headers", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(STOP_TIMEOUT_S)


def _forwarding_to(target: str) -> type[BaseHTTPRequestHandler]:
    """A handler class that forwards each POST to `target` and adds LIMIT_HEADERS."""

    class Forward(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
            }
            answer = httpx.post(target + self.path, content=body, headers=headers, timeout=30)
            self.send_response(answer.status_code)
            self.send_header("content-type", "application/json")
            for name, value in LIMIT_HEADERS.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args: object) -> None:
            """Quiet: llm-katan logs each request already."""

    return Forward
