"""A model caller that makes each call a `chat {model}` span with the GenAI conventions'
attributes (token counts, models, provider) and its cost; never the messages themselves.

teamctl makes these spans itself rather than through litellm's OpenTelemetry callback: that
callback is process-global state (litellm.callbacks) with a provider of its own, and it writes
its attributes onto whatever span is current instead of making a child, so its shapes are not
the tree a run's trace needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from teamctl.shared.agent.model_caller import Message, ModelCaller
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.tracing import NO_SPAN, Attributes, Span

RESPONSE_MODEL_CHARS = 200
"""How much of the model name a provider's reply gives a span keeps (the provider wrote it)."""


@dataclass
class TracingCaller:
    """Wraps the caller that makes real model calls; `span` is the agent's invocation."""

    inner: ModelCaller
    span: Span

    def complete(
        self,
        model: str,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
    ) -> ModelReply:
        if self.span is NO_SPAN:  # tracing off: not even the attributes are built
            return self.inner.complete(model, messages, tools=tools, api_base=api_base)
        with self.span.child(f"chat {model}", request_attributes(model, messages, tools)) as chat:
            reply = self.inner.complete(model, messages, tools=tools, api_base=api_base)
            chat.set(reply_attributes(reply, model))
            return reply


def request_attributes(
    model: str, messages: list[Message], tools: list[dict[str, Any]] | None
) -> Attributes:
    """What a chat span says of the request: the model, its provider, and counts."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": provider_name(model),
        "teamctl.request.messages": len(messages),
        "teamctl.request.tools": len(tools or ()),
    }


def reply_attributes(reply: ModelReply, requested: str | None = None) -> Attributes:
    """What a chat span says of the reply: tokens, cost, the answering model (the model string
    called, and whether it was a fallback of the `requested` one), tool calls."""
    usage = reply.usage
    fallback = None if requested is None or reply.model is None else reply.model != requested
    return {
        "gen_ai.response.model": (reply.response_model or "")[:RESPONSE_MODEL_CHARS] or None,
        "teamctl.model.answered": reply.model,
        "teamctl.model.fallback": fallback,
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "teamctl.cost_usd": None if usage.unpriced else usage.cost_usd,
        "teamctl.response.tool_calls": len(reply.tool_calls),
    }


def provider_name(model: str) -> str | None:
    """The provider a litellm model name routes to by its prefix (openai/..., anthropic/...);
    None when the name has none (litellm then guesses, and so would a trace)."""
    prefix, slash, _ = model.partition("/")
    return prefix if slash and prefix else None
