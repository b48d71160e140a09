"""The one path to a model: litellm, imported lazily, no hidden retries, usage and cost recorded."""

from __future__ import annotations

import copy
import logging
import os
import random
import re
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from teamctl.shared.agent.offline_model import PROVIDER, make_provider
from teamctl.shared.agent.replies import ModelReply, ToolCall, Usage
from teamctl.shared.errors import ConfigError, CredentialsError, ModelError, ModelUnavailable
from teamctl.shared.process.log_lines import LITELLM_LOGGERS, adopt_loggers
from teamctl.shared.providers.limit_headers import (
    error_headers,
    learned_from,
    response_headers,
    retry_after_s,
)
from teamctl.shared.providers.limits import CallScope
from teamctl.shared.redis.url_secrets import shown_url
from teamctl.shared.text import one_line

if TYPE_CHECKING:
    from teamctl.shared.providers.limits import ProviderLimits, Ticket

log = logging.getLogger(__name__)

LOCAL_COST_MAP_ENV = ("LITELLM_LOCAL_MODEL_COST_MAP", "True")
"""Set before litellm is imported: its cost map is read from the wheel, not fetched (no network,
and no background thread left in a parent that RQ will fork)."""
RETRYABLE_STATUS = {408, 409, 429}
"""Besides every 5xx (Anthropic's 529 "overloaded" included)."""
RETRY_AFTER_MAX_S = 60.0
"""The longest a Retry-After header may make teamctl wait before retrying a model call."""
SHORTEST_PAUSE_MS = 100
"""The least a 429 pauses its account for, whatever time the provider named."""
NO_KEY = "teamctl-no-key"
"""The key sent to a local server when its provider's variable is not set (the client insists
on one): a 401 or 403 to it means the key is missing, not wrong."""
KEYS_IN_WORKERS = "the workers (workers make every model call and read {it} when they start)"
"""Whose environment needs the provider's credentials, for error messages ({it}: it or them)."""
CREDENTIAL_VARS = {
    # litellm's documented credentials where they are not one <PROVIDER>_API_KEY (Azure's is
    # AZURE_API_KEY, which provider_key_var gives).
    "bedrock": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "sagemaker": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "sagemaker_chat": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "vertex_ai": ("GOOGLE_APPLICATION_CREDENTIALS",),
}
MISSING_CREDENTIALS = re.compile(
    r"missing\s+(?:[\w.-]+\s+){0,3}?(?:api[\s_-]?key|credentials)"  # litellm's, the SDKs'
    r"|api_key client option must be set"  # older openai SDKs
    r"|unable to locate credentials"  # botocore: bedrock, sagemaker
    r"|default credentials were not found",  # google-auth: vertex_ai
    re.IGNORECASE,
)
"""How litellm and the SDKs under it say that no credentials were found. Reported with status
500 by some (the openai SDK's, through litellm), so only their text tells them apart."""
LITELLM_PREFIX = re.compile(r"^(?:litellm\.)?\w*(?:Error|Exception)(?: \w+Error)?\s*[:-]\s*")
"""One of the class names litellm puts before a provider's words ("litellm.AuthenticationError:
AuthenticationError: OpenAIException - ...")."""
MISSING_SDK = "Google Cloud SDK not found"
"""How litellm says google-auth (vertex_ai/'s credentials) is not installed."""
NO_PROVIDER = "LLM Provider NOT provided"
"""How litellm says a model string names no provider it knows."""
PROVIDER_TEXT_CHARS = 160
"""How much of a provider's refusal a credentials error quotes: enough for its reason."""


def load_litellm() -> Any:
    """Import litellm once, offline (local cost map), with the offline provider registered."""
    os.environ.setdefault(*LOCAL_COST_MAP_ENV)
    import litellm

    if not any(item["provider"] == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map = [
            *litellm.custom_provider_map,
            {"provider": PROVIDER, "custom_handler": make_provider()},
        ]
    litellm.suppress_debug_info = True
    adopt_loggers(LITELLM_LOGGERS)  # its records through this process's printable log lines
    return litellm


class LitellmClient:
    """Calls models through litellm with teamctl's own bounded retry and backoff."""

    def __init__(
        self,
        *,
        provider_keys: Collection[str],
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        keys_in: str = KEYS_IN_WORKERS,
        limits: ProviderLimits | None = None,
        scope: CallScope | None = None,
    ) -> None:
        self.provider_keys = frozenset(provider_keys)
        """Which `*_API_KEY` variables are set (Settings.provider_keys): names, not values."""
        self.keys_in = keys_in
        """Whose environment a credentials error tells the user to fix ({it}: it or them)."""
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.limits = limits
        """The gate shared by every worker (None: calls wait for no one and charge nothing)."""
        self.scope = scope or CallScope()
        """Who pays for this client's calls and how its waits end."""

    def scoped(self, scope: CallScope) -> LitellmClient:
        """This client for one caller: its budget, its task, its stop, where its waits show."""
        client = copy.copy(self)
        client.scope = scope
        return client

    def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
        wait_limit_s: float | None = None,
    ) -> ModelReply:
        """One model turn; retries 429, 5xx and timeouts, then raises ModelUnavailable (as at
        once for a context-window or content-policy refusal), other refusals ModelError
        (CredentialsError at once when the provider's credentials are missing or rejected).

        `wait_limit_s`: how long this call may wait for its provider's account before it
        raises ModelUnavailable("paused") instead (a caller with a fallback model sets it).
        """
        litellm = load_litellm()
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "timeout": self.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
        }
        if tools:
            kwargs["tools"] = tools
        if api_base and not model.startswith(PROVIDER):
            kwargs["api_base"] = api_base
            # Local OpenAI-compatible servers rarely need a key, but the client insists on one.
            # Only this model's provider's key counts: an ANTHROPIC_API_KEY in the environment
            # must not leave an openai/ model on a local server without one. Providers whose
            # credentials are not one key (AWS's, Google's) sign with their own: a placeholder
            # key would replace that signature with a bearer token, when they are set.
            if provider_key_var(litellm, model) not in self.provider_keys and not _signs_itself(
                litellm, model
            ):
                kwargs["api_key"] = NO_KEY
        attempt = 0
        while True:
            ticket = self._take(litellm, model, kwargs, wait_limit_s)
            try:
                response = litellm.completion(**kwargs)
            except Exception as exc:  # litellm raises many exception types; classify below
                named = self._settle_refusal(ticket, exc)
                # No retry can fix credentials: only the environment of a restarted worker can.
                bad_credentials = credentials_error(
                    litellm, model, exc, self.keys_in, sent_no_key=kwargs.get("api_key") == NO_KEY
                )
                if bad_credentials is not None:
                    raise bad_credentials from exc
                if NO_PROVIDER in str(exc):  # a misspelt model string: no retry mends it
                    raise ConfigError(
                        f"model {model}: litellm knows no provider by that name; "
                        "write it as PROVIDER/MODEL (openai/gpt-4o-mini, "
                        "anthropic/claude-3-5-haiku-latest, ...) or "
                        f"{PROVIDER}/default for the offline model"
                    ) from exc
                if MISSING_SDK in str(exc):  # no retry installs a package
                    raise ConfigError(
                        f"model {model}: litellm needs the google-auth package for"
                        " this provider: install it where the workers run "
                        "(pip install google-auth)"
                    ) from exc
                refusal = _refusal(litellm, exc)
                if refusal is not None:
                    raise ModelUnavailable(
                        f"model {model} refused the request ({refusal}): {describe_error(exc)}",
                        model=model,
                        reason=refusal,
                    ) from exc
                if not _retryable(exc):
                    raise ModelError(
                        f"model {model} failed: {describe_error(exc, kwargs.get('api_base'))}"
                    ) from exc
                if named:  # the account waits as the provider said: not a retry spent
                    log.warning(
                        "model %s: %s; every caller of its account waits",
                        model,
                        describe_error(exc),
                    )
                    continue
                if attempt >= self.max_retries:
                    raise ModelUnavailable(
                        f"model {model} failed: {describe_error(exc, kwargs.get('api_base'))}",
                        model=model,
                        reason="retries_spent",
                    ) from exc
                self._back_off(
                    model,
                    exc,
                    attempt,
                    gated=ticket is not None and bool(self.limits and self.limits.rates),
                )
                attempt += 1
                continue
            reply = _reply(litellm, response).model_copy(update={"model": model})
            if ticket is not None and self.limits is not None:
                learned = learned_from(response_headers(response)) if self.limits.rates else None
                self.limits.settle(ticket, self.scope, answered=reply.usage, learned=learned)
            return reply

    def _back_off(self, model: str, exc: Exception, attempt: int, *, gated: bool) -> None:
        """Sleep before retry `attempt` + 1: exponential with jitter, or what the provider
        named (ungated: a gated 429 already paused the account, its take waits)."""
        delay_s = min(self.backoff_max_s, self.backoff_base_s * 2**attempt)
        delay_s *= 0.5 + random.random() / 2
        if not gated:  # a provider that says when to come back is believed, within reason
            delay_s = max(delay_s, min(_retry_after_s(exc) or 0.0, RETRY_AFTER_MAX_S))
        elif getattr(exc, "status_code", None) == 429:
            delay_s = 0.0  # the account's pause (1 s, doubling) is the backoff
        log.warning(
            "model %s: %s; retry %d in %.2fs", model, describe_error(exc), attempt + 1, delay_s
        )
        time.sleep(delay_s)

    def _take(
        self, litellm: Any, model: str, kwargs: dict[str, Any], wait_limit_s: float | None
    ) -> Ticket | None:
        """This attempt's slot on its provider's account and its budget reservation (None: no
        gate; the offline model has no provider to share, only a run's or team's usage and
        budget to keep)."""
        if self.limits is None:
            return None
        if model.startswith(PROVIDER):
            if self.scope.budget is None:
                return None
            keys = self.limits.keys_for(PROVIDER, None, ())
        else:
            key_vars = () if kwargs.get("api_key") == NO_KEY else credential_vars(litellm, model)
            keys = self.limits.keys_for(_provider(litellm, model), kwargs.get("api_base"), key_vars)
        return self.limits.take(litellm, keys, model, kwargs, self.scope, wait_limit_s)

    def _settle_refusal(self, ticket: Ticket | None, exc: Exception) -> bool:
        """Settle a failed attempt: what its headers say, and a 429 pauses the account for
        every worker. True when the provider named the time to come back."""
        if ticket is None or self.limits is None:
            return False
        if not self.limits.rates:  # the limiter is off: the reservation only comes back
            self.limits.settle(ticket, self.scope, answered=None)
            return False
        headers = error_headers(exc)
        learned = learned_from(headers)
        pause = ""
        named = False
        if getattr(exc, "status_code", None) == 429:
            named = learned.retry_after_s is not None or learned.model_pause_s is not None
            wait_s = (
                learned.retry_after_s
                if learned.retry_after_s is not None
                else (learned.model_pause_s)
            )
            # A named time of 0 still pauses a little: no fleet hammers a refusing provider.
            pause = "backoff" if wait_s is None else str(max(SHORTEST_PAUSE_MS, int(wait_s * 1000)))
        self.limits.settle(ticket, self.scope, answered=None, learned=learned, pause=pause)
        return named


def _retry_after_s(exc: Exception) -> float | None:
    """The seconds a 429/503 reply's Retry-After (or retry-after-ms) header asks for, wherever
    litellm put this provider's headers (None: not given)."""
    return retry_after_s(error_headers(exc))


def provider_key_var(litellm: Any, model: str) -> str:
    """The environment variable holding the key of `model`'s provider, as litellm routes it."""
    return f"{_provider(litellm, model).upper()}_API_KEY"


def credential_vars(litellm: Any, model: str) -> tuple[str, ...]:
    """The environment variables litellm reads the credentials of `model`'s provider from."""
    provider = _provider(litellm, model)
    return CREDENTIAL_VARS.get(provider, (f"{provider.upper()}_API_KEY",))


def provider_name(litellm: Any, model: str) -> str:
    """`model`'s provider as litellm routes it (an account's digest names it)."""
    return _provider(litellm, model)


def _signs_itself(litellm: Any, model: str) -> bool:
    """Whether `model`'s provider has credentials other than one key (AWS's, Google's) and
    they are set here: litellm signs its requests with them."""
    names = CREDENTIAL_VARS.get(_provider(litellm, model), ())
    return bool(names) and all(os.environ.get(name, "").strip() for name in names)


def _provider(litellm: Any, model: str) -> str:
    """`model`'s provider as litellm routes it."""
    try:
        return str(litellm.get_llm_provider(model)[1])
    except Exception:  # a name litellm cannot place: its prefix, else OpenAI-compatible
        return model.split("/", 1)[0] if "/" in model else "openai"


def credentials_error(
    litellm: Any,
    model: str,
    exc: Exception,
    keys_in: str = KEYS_IN_WORKERS,
    *,
    sent_no_key: bool = False,
) -> CredentialsError | None:
    """A one-line CredentialsError naming the variables to set when `exc` says the provider's
    credentials are missing or were rejected (401, 403), else None.

    `sent_no_key`: the request carried NO_KEY, so a refusal means no key was set at all.
    """
    status = getattr(exc, "status_code", None)
    denied = status == 403 or isinstance(exc, litellm.PermissionDeniedError)
    # litellm maps a 403 from an OpenAI-compatible server to a plain APIError: hence the status.
    refused = denied or status == 401 or isinstance(exc, litellm.AuthenticationError)
    missing = MISSING_CREDENTIALS.search(str(exc)) is not None
    if not (refused or missing):
        return None
    names = credential_vars(litellm, model)
    wanted = " and ".join(names)
    where = keys_in.format(it="them" if len(names) > 1 else "it")
    if missing:
        return CredentialsError(
            f"model {model}: missing credentials: set {wanted} in the environment of {where}"
        )
    answer = f"{403 if denied else 401}: {_provider_text(exc, names)}"
    # Some providers' requests go out without a key when none is set (mistral, groq, ...).
    # Table credentials are left out: AWS and Google have other sources (profiles, roles).
    key_unset = names[0].endswith("_API_KEY") and not os.environ.get(names[0], "").strip()
    if sent_no_key or key_unset:
        return CredentialsError(
            f"model {model}: missing credentials (the server answered "
            f"{answer}): set {wanted} in the environment of {where}"
        )
    if denied:  # known, but not allowed this model or operation
        return CredentialsError(
            f"model {model}: the provider denied {wanted} access ({answer}):"
            f" set credentials allowed to use this model in the environment"
            f" of {where}"
        )
    valid = "valid ones" if len(names) > 1 else "a valid key"
    return CredentialsError(
        f"model {model}: the provider rejected {wanted} ({answer}): set "
        f"{valid} in the environment of {where}"
    )


def _provider_text(exc: Exception, names: tuple[str, ...]) -> str:
    """The provider's words in `exc`, without litellm's class names, short and on one line (it
    reaches a terminal), and without the value of any of `names` (a provider may echo a key)."""
    text = str(exc)
    while (bare := LITELLM_PREFIX.sub("", text, count=1)) != text:
        text = bare
    for name in names:
        value = os.environ.get(name, "").strip()
        if len(value) >= 4:  # a shorter "key" would only mangle the text
            text = text.replace(value, f"<{name}>")
    return one_line(text, PROVIDER_TEXT_CHARS) or type(exc).__name__


def _refusal(litellm: Any, exc: Exception) -> str | None:
    """ "context_window" or "content_policy" when the provider refused the request for a reason
    another model may not share (litellm maps each provider's wording to these classes)."""
    if isinstance(exc, litellm.ContextWindowExceededError):
        return "context_window"
    if isinstance(exc, litellm.ContentPolicyViolationError):
        return "content_policy"
    return None


def _retryable(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in RETRYABLE_STATUS or 500 <= status <= 599
    return "timeout" in type(exc).__name__.lower()


def describe_error(exc: Exception, api_base: str | None = None) -> str:
    """The error's text, with its root cause's when that is a network or TLS failure, and then
    where the call went (`api_base`): litellm reports a refused certificate or connection only
    as "Connection error.", naming neither."""
    text = str(exc).strip() or type(exc).__name__
    root = _root_cause(exc)
    cause = str(root).strip()
    # OSError covers ssl.SSLError and refused or unreachable connections; an HTTP error reply's
    # own cause (httpx's status error) would only repeat the status with the URL.
    if isinstance(root, OSError) and root is not exc and cause and cause not in text:
        where = f", at {shown_url(api_base)}" if api_base else ""
        text = f"{text} (cause: {type(root).__name__}: {cause}{where})"
    return text[:2000]


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of `exc`'s chain (raised from, or while handling)."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


def _reply(litellm: Any, response: Any) -> ModelReply:
    message = response.choices[0].message
    calls = [
        ToolCall(
            id=c.id or f"call_{i}", name=c.function.name or "", arguments=c.function.arguments or ""
        )
        for i, c in enumerate(getattr(message, "tool_calls", None) or [])
    ]
    model = getattr(response, "model", None)
    return ModelReply(
        content=message.content,
        tool_calls=calls,
        usage=_usage(litellm, response),
        response_model=model if isinstance(model, str) else None,
    )


_UNPRICED_YET = object()
"""A reply litellm did not price (none of its own): teamctl asks litellm's price list."""


def _usage(litellm: Any, response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    # litellm prices each reply it returns, None when it knows no price; asking it again only
    # fails again (~1.5 ms of lookups a call for a model it does not know).
    cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost", _UNPRICED_YET)
    if cost is _UNPRICED_YET:
        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception:  # no price known for this model: recorded as unpriced
            cost = None
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=float(cost or 0.0),
        unpriced=cost is None,
    )
