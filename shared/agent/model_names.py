"""Model strings as a team file, a flag or the lead names them: checked once, where they enter."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

MODEL_NAME_MAX_CHARS = 200
"""Longest model string teamctl takes (litellm's are far shorter)."""
DEFAULT_FALLBACK_AFTER_S = 10.0
"""A provider's pause after a 429 is mostly seconds (a per-second or per-minute bucket
refilling): waiting that out keeps the primary model; a longer pause (a spent quota, an
outage) costs more than the fallback's answer, so the call moves on."""
DEFAULT_FALLBACK_COOLDOWN_S = 30.0
"""Long enough that a primary down for minutes costs its full retries about once per half
minute per model, not on every call; short enough that a run is back on it soon after it
recovers."""
MAX_FALLBACKS = 8
"""Most fallback models one role lists: each is tried in turn, so more only adds waiting."""


def checked_model_name(name: str) -> str:
    """A model string unchanged, or ValueError: non-empty, at most 200 characters, and free of
    whitespace and commas (a teammate's fallbacks are stored comma-separated, and per-model usage
    fields are `MODEL METRIC`)."""
    if not name.strip() or len(name) > MODEL_NAME_MAX_CHARS:
        raise ValueError(
            f"a model is a non-empty name of at most {MODEL_NAME_MAX_CHARS} characters"
        )
    if any(char.isspace() or char == "," for char in name):
        raise ValueError(
            f"model {name!r}: a model string has no spaces or commas (e.g. "
            "anthropic/claude-3-5-haiku-latest)"
        )
    return name


def checked_fallbacks(names: list[str]) -> list[str]:
    """A role's fallback models, deduplicated in order; ValueError past MAX_FALLBACKS."""
    unique = list(dict.fromkeys(checked_model_name(name) for name in names))
    if len(unique) > MAX_FALLBACKS:
        raise ValueError(f"at most {MAX_FALLBACKS} fallback models; list fewer")
    return unique


ModelName = Annotated[str, AfterValidator(checked_model_name)]
"""A model string from a team file or a flag."""
Fallbacks = Annotated[list[str], AfterValidator(checked_fallbacks)]
"""A role's fallback models, in the order they are tried after its own."""
