"""A rate-limited provider for the scripted server: a token bucket of R requests a second (and,
optionally, T tokens a minute) that answers 429 past it, with Retry-After and OpenAI's
x-ratelimit-* headers as configured, counting what it served and refused.

It is a ScriptedLLM handler (run under the server's lock), so the buckets see requests in the
order the server takes them, as a provider's would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.llm import Headed, HttpError, Reply, ToolCalls

REQUEST_TOKENS = 18
"""What each scripted reply's usage says (11 prompt + 7 completion): the TPM bucket's cost."""


@dataclass
class RateLimitedProvider:
    """Token buckets: `rps` requests a second (burst `burst`), `tpm` tokens a minute (None: no
    token limit); `headers` picks what is sent: "retry-after" on a 429, "openai" for the
    x-ratelimit-* headers on every reply."""

    rps: float
    burst: float = 1.0
    tpm: float | None = None
    headers: frozenset[str] = frozenset({"retry-after"})
    reply: str | ToolCalls = "done"
    answer: Callable[[dict[str, Any]], Reply] | None = None
    """What a served request gets, from its body (None: `reply`)."""
    served: int = 0
    refused: int = 0
    served_times: list[float] = field(default_factory=list)
    _requests: float = field(default=-1.0, init=False)
    _tokens: float = field(default=-1.0, init=False)
    _at: float = field(default_factory=time.monotonic, init=False)

    def __post_init__(self) -> None:
        self._requests = self.burst
        self._tokens = self.tpm / 60 if self.tpm else 0.0

    def handler(self, body: dict[str, Any]) -> Reply:
        """Serve `reply` while both buckets allow, else 429."""
        now = time.monotonic()
        elapsed, self._at = now - self._at, now
        self._requests = min(self.burst, self._requests + elapsed * self.rps)
        if self.tpm:
            self._tokens = min(self.tpm / 60, self._tokens + elapsed * self.tpm / 60)
        tokens_ok = not self.tpm or self._tokens >= REQUEST_TOKENS
        if self._requests >= 1 and tokens_ok:
            self._requests -= 1
            if self.tpm:
                self._tokens -= REQUEST_TOKENS
            self.served += 1
            self.served_times.append(now)
            served = self.answer(body) if self.answer else self.reply
            assert isinstance(served, str | ToolCalls | HttpError)
            return Headed(served, self._limit_headers())
        self.refused += 1
        wait_s = max((1 - self._requests) / self.rps, 0.0)
        if self.tpm and not tokens_ok:
            wait_s = max(wait_s, (REQUEST_TOKENS - self._tokens) / (self.tpm / 60))
        headers = self._limit_headers()
        if "retry-after" in self.headers:
            headers["retry-after"] = f"{math.ceil(wait_s * 1000) / 1000:g}"
        return Headed(HttpError(429, "rate limit reached (scripted bucket)"), headers)

    def _limit_headers(self) -> dict[str, str]:
        """OpenAI's x-ratelimit-* as this bucket stands, when configured."""
        if "openai" not in self.headers:
            return {}
        left = int(self._requests)
        reset_ms = math.ceil((1 - self._requests % 1) / self.rps * 1000)
        headers = {
            "x-ratelimit-limit-requests": f"{int(self.rps * 60)}",
            "x-ratelimit-remaining-requests": str(left),
            "x-ratelimit-reset-requests": f"{reset_ms}ms",
        }
        if self.tpm:
            headers |= {
                "x-ratelimit-limit-tokens": f"{int(self.tpm)}",
                "x-ratelimit-remaining-tokens": str(max(0, int(self._tokens))),
                "x-ratelimit-reset-tokens": "1s",
            }
        return headers
