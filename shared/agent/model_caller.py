"""What answers a model call: the one method the agent loop and every wrapper around a model need.

The litellm client (llm.py) answers by calling the provider; the wrappers around it answer by
tracing the call (tracing_caller.py), trying fallback models (fallbacks.py) or replaying a
journal first (worker/runs/replaying_caller.py).
"""

from __future__ import annotations

from typing import Any, Protocol

from teamctl.shared.agent.replies import ModelReply

Message = dict[str, Any]
"""A chat message as the model's API takes it."""


class ModelCaller(Protocol):
    """Something that answers one model call with a reply."""

    def complete(
        self,
        model: str,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
    ) -> ModelReply: ...
