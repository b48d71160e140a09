"""What providers say of their rate limits in HTTP headers, read from what litellm hands over.

On a success litellm keeps the provider's headers in `response._hidden_params
["additional_headers"]`, each prefixed `llm_provider-` (the unprefixed ones are litellm's own
mapping, e.g. Anthropic's limits renamed to OpenAI's); on an error, in `exc.response.headers`
(OpenAI-compatible providers) or `exc.litellm_response_headers` (Anthropic, among others).
Read: Retry-After (seconds or an HTTP date), retry-after-ms, OpenAI's x-ratelimit-* and
Anthropic's anthropic-ratelimit-*.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

PROVIDER_PREFIX = "llm_provider-"
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
"""One part of an OpenAI reset duration: "6m0s", "1s", "120ms", "1h2m3.5s"."""
DURATION_SCALE_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
LONGEST_PAUSE_S = 3600.0
"""A reset further than this is taken as this far: a wrong clock or header must not stop a
fleet for a day (a run's timeout_s ends a wait sooner anyway)."""


class Learned(BaseModel):
    """What one reply's headers say: limits per minute, and pauses in seconds from now."""

    rpm: int | None = None
    tpm: int | None = None
    model_pause_s: float | None = None
    """The model's quota is out (a remaining count at 0) until its reset."""
    retry_after_s: float | None = None
    """How long the provider asked callers to stay away (Retry-After, retry-after-ms)."""

    @property
    def any(self) -> bool:
        """Whether the headers said anything of limits."""
        return any(
            v is not None for v in (self.rpm, self.tpm, self.model_pause_s, self.retry_after_s)
        )


def response_headers(response: Any) -> dict[str, str]:
    """A success's provider headers (lower-case names, without litellm's prefix)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    raw = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    if not isinstance(raw, Mapping):
        return {}
    prefixed = {
        k.lower()[len(PROVIDER_PREFIX) :]: str(v)
        for k, v in raw.items()
        if k.lower().startswith(PROVIDER_PREFIX)
    }
    return prefixed or {k.lower(): str(v) for k, v in raw.items()}


def error_headers(exc: BaseException) -> dict[str, str]:
    """An error's provider headers, wherever litellm put them for this provider."""
    found: dict[str, str] = {}
    for source in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        try:
            found.update({str(k).lower(): str(v) for k, v in (source or {}).items()})
        except (AttributeError, TypeError):  # a mock response or an odd type: nothing said
            continue
    return found


def learned_from(headers: Mapping[str, str], now_s: float | None = None) -> Learned:
    """The limits and pauses `headers` announce (lower-case names)."""
    now_s = time.time() if now_s is None else now_s
    rpm = _integer(
        headers.get("x-ratelimit-limit-requests")
        or headers.get("anthropic-ratelimit-requests-limit")
    )
    tpm = _integer(
        headers.get("x-ratelimit-limit-tokens")
        or headers.get("anthropic-ratelimit-tokens-limit")
        or headers.get("anthropic-ratelimit-input-tokens-limit")
    )
    pauses = [
        _reset_s(headers, kind, now_s)
        for kind in ("requests", "tokens", "input-tokens", "output-tokens")
    ]
    known = [p for p in pauses if p is not None]
    return Learned(
        rpm=rpm,
        tpm=tpm,
        model_pause_s=max(known) if known else None,
        retry_after_s=retry_after_s(headers, now_s),
    )


def retry_after_s(headers: Mapping[str, str], now_s: float | None = None) -> float | None:
    """Seconds the provider asked to wait: retry-after-ms, else Retry-After (seconds or an HTTP
    date); None when it named no time."""
    now_s = time.time() if now_s is None else now_s
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return _bounded(ms / 1000)
    value = (headers.get("retry-after") or "").strip()
    seconds = _number(value)
    if seconds is not None:
        return _bounded(seconds)
    if value:
        try:
            return _bounded(email.utils.parsedate_to_datetime(value).timestamp() - now_s)
        except (TypeError, ValueError):
            return None
    return None


def _reset_s(headers: Mapping[str, str], kind: str, now_s: float) -> float | None:
    """Seconds until a limit whose remaining count is 0 resets (None: some left, or unsaid)."""
    openai_left = headers.get(f"x-ratelimit-remaining-{kind}")
    if openai_left is not None and _integer(openai_left) == 0:
        return _bounded(_duration_s(headers.get(f"x-ratelimit-reset-{kind}", "")) or 1.0)
    left = headers.get(f"anthropic-ratelimit-{kind}-remaining")
    if left is not None and _integer(left) == 0:
        return _bounded(
            _rfc3339_s(headers.get(f"anthropic-ratelimit-{kind}-reset", ""), now_s) or 1.0
        )
    return None


def _duration_s(text: str) -> float | None:
    """OpenAI's reset durations ("6m0s", "1s", "120ms"), or plain seconds."""
    text = text.strip()
    plain = _number(text)
    if plain is not None:
        return plain
    parts = DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * DURATION_SCALE_S[u] for n, u in parts)


def _rfc3339_s(text: str, now_s: float) -> float | None:
    """Seconds from now until an RFC 3339 time (Anthropic's resets)."""
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp() - now_s
    except ValueError:
        return None


def _bounded(seconds: float) -> float:
    return min(max(0.0, seconds), LONGEST_PAUSE_S)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None and text.strip() else None
    except ValueError:
        return None


def _integer(text: str | None) -> int | None:
    value = _number(text)
    return int(value) if value is not None and value >= 0 else None
