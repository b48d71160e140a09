"""What a model call returns, for a run member, a teammate, the lead and the coordinator's roles
alike: its text, its tool calls and their usage."""

from __future__ import annotations

from pydantic import BaseModel, Field
from teamctl.shared.text import counted


class Usage(BaseModel):
    """Token and cost totals; `unpriced` when some call had no known price."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens

    def tokens_text(self) -> str:
        """`2,455 tokens`: how the CLI and the dashboard alike say the tokens used."""
        return counted(self.tokens, "token")

    def cost_text(self) -> str:
        """The cost in dollars, `+` after it when some call had no known price (the figure is
        then a lower bound); `unpriced` when no priced call was made: none had a known price,
        or none used a token (a run whose calls all failed), so there is no figure to give."""
        priced = self.cost_usd > 0 or (self.tokens > 0 and not self.unpriced)
        if not priced:
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
