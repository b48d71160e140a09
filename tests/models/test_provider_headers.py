"""Which provider rate-limit headers reach teamctl through litellm, per family: on a reply
(`_hidden_params["additional_headers"]`) and on a 429 (`exc.litellm_response_headers`,
`exc.response.headers`). llm-katan speaks each family's API; a proxy adds the headers. What the
limiter may learn from depends on exactly this, so a litellm upgrade that changes it fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from teamctl.shared.agent.llm import _retry_after_s, load_litellm

from tests.support.katan import LIMIT_HEADERS, Katan, llm_katan, with_limit_headers

PROVIDER_PREFIX = "llm_provider-"
"""litellm's prefix for every header of the provider's reply, kept as sent."""
OPENAI_NAMES = {
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
}
RESETS = {"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"}
UNPREFIXED_ON_SUCCESS = {
    # litellm copies OpenAI's names unprefixed (not their resets), maps Anthropic's to them,
    # and for Bedrock's Converse copies the resets too; Gemini's replies give no header at all.
    "openai/gpt-4o-mini": OPENAI_NAMES,
    "azure/gpt-4o-mini": OPENAI_NAMES,
    "anthropic/claude-3-5-haiku-latest": OPENAI_NAMES,
    "bedrock/anthropic.claude-3-haiku-20240307-v1:0": OPENAI_NAMES | RESETS,
    "bedrock/converse/anthropic.claude-3-haiku-20240307-v1:0": OPENAI_NAMES | RESETS,
    "bedrock/invoke/anthropic.claude-3-haiku-20240307-v1:0": OPENAI_NAMES,
    "gemini/gemini-1.5-flash": set(),
}
RESPONSE_HEADERS_EMPTY_ON_429 = {"anthropic/claude-3-5-haiku-latest", "gemini/gemini-1.5-flash"}
"""Families whose 429 carries no headers on exc.response (litellm_response_headers has them)."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(answering, refusing with 429) llm-katan base URLs, each behind the header proxy."""
    root = tmp_path_factory.mktemp("katan-headers")
    with (
        llm_katan(root / "ok") as ok,
        llm_katan(root / "limited", "--rate-limit-after", "1") as limited,
    ):
        spend_first_request(limited)
        with with_limit_headers(ok.url) as answering, with_limit_headers(limited.url) as refusing:
            yield answering, refusing


def spend_first_request(katan: Katan) -> None:
    """`--rate-limit-after 1` answers one request: take it, so every later one is a 429."""
    answer = httpx.post(
        f"{katan.url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": "Bearer k"},
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert answer.status_code == 200


def call(model: str, base: str) -> Any:
    """litellm.completion as LitellmClient makes it (no retries), with each family's api_base.
    Gemini's key goes in Authorization: llm-katan does not read x-goog-api-key."""
    path = {"openai": "/v1", "gemini": "/v1beta"}.get(model.split("/")[0], "")
    extra = {"authorization": "Bearer k"} if model.startswith("gemini/") else None
    return load_litellm().completion(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        api_base=base + path,
        api_key="k",
        extra_headers=extra,
        num_retries=0,
        max_retries=0,
        timeout=30,
    )


@pytest.mark.parametrize("model", sorted(UNPREFIXED_ON_SUCCESS))
def test_headers_of_a_reply(servers: tuple[str, str], model: str) -> None:
    headers = call(model, servers[0])._hidden_params.get("additional_headers") or {}
    unprefixed = {k for k in headers if not k.startswith(PROVIDER_PREFIX)}
    assert unprefixed == UNPREFIXED_ON_SUCCESS[model]
    raw = {k.removeprefix(PROVIDER_PREFIX) for k in headers if k.startswith(PROVIDER_PREFIX)}
    if model.startswith("gemini/"):
        assert raw == set()
    else:
        assert set(LIMIT_HEADERS) <= raw
        assert headers[f"{PROVIDER_PREFIX}retry-after"] == "2"


@pytest.mark.parametrize("model", sorted(UNPREFIXED_ON_SUCCESS))
def test_headers_of_a_429(servers: tuple[str, str], model: str) -> None:
    litellm = load_litellm()
    with pytest.raises(litellm.RateLimitError) as raised:
        call(model, servers[1])
    exc = raised.value
    assert exc.status_code == 429
    assert {
        k.lower(): v for k, v in exc.litellm_response_headers.items() if k.lower() in LIMIT_HEADERS
    } == LIMIT_HEADERS
    on_response = {k.lower() for k in exc.response.headers}
    if model in RESPONSE_HEADERS_EMPTY_ON_429:
        assert on_response & set(LIMIT_HEADERS) == set()
    else:
        assert set(LIMIT_HEADERS) <= on_response


@pytest.mark.parametrize("model", sorted(UNPREFIXED_ON_SUCCESS))
def test_model_client_believes_each_familys_retry_after(
    servers: tuple[str, str], model: str
) -> None:
    litellm = load_litellm()
    with pytest.raises(litellm.RateLimitError) as raised:
        call(model, servers[1])
    # retry-after-ms, the finer of the two the proxy sends, wins (as OpenAI's SDK reads them).
    assert _retry_after_s(raised.value) == float(LIMIT_HEADERS["retry-after-ms"]) / 1000
