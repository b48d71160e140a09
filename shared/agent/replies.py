"""What a model call returns, for a run member, a teammate, the lead and the coordinator's roles
alike: its text, its tool calls and their usage."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Usage(BaseModel):
    """Token and cost totals; `unpriced` when some call had no known price."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False

    def cost_text(self) -> str:
        """The cost in dollars; `unpriced` when no call had a known price, and a `+` when some
        did not (the figure is then a lower bound)."""
        if self.unpriced and not self.cost_usd:
            return "unpriced"
        return f"${self.cost_usd:.4f}{'+' if self.unpriced else ''}"

    def plus(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            unpriced=self.unpriced or other.unpriced,
        )


class ToolCall(BaseModel):
    """One tool call the model asked for; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str = ""


class ModelReply(BaseModel):
    """A model turn: text and/or tool calls, with what it cost."""

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None
    """The model string that was called and answered (a fallback's, when the primary could
    not): what transcripts, status, events and per-model usage name."""
    response_model: str | None = Field(None, exclude=True)
    """The model that answered, as the provider names it (for traces; not kept with a reply)."""
