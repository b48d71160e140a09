"""Usage per answering model of a run or a team (its `model_usage` hash): read by status, the
result JSON and `teamctl teams`, written by shared/agent/fallbacks.py ModelLedger. Light on
purpose: the CLI's read-only verbs import it."""

from __future__ import annotations

from typing import Any

import redis
from pydantic import BaseModel
from teamctl.shared.agent.replies import Usage
from teamctl.shared.keys import KeySpace

MODEL_METRICS = (
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "calls",
    "fallback_calls",
    "unpriced",
)
"""The fields of one model in a `model_usage` hash (`MODEL METRIC`)."""


class ModelUsage(BaseModel):
    """One model's share of a run's or team's usage."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False
    calls: int = 0
    fallback_calls: int = 0
    """Calls it answered as a fallback (another model was the call's own)."""

    @property
    def usage(self) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=self.cost_usd,
            unpriced=self.unpriced,
        )


def usage_by_model(conn: redis.Redis, keys: KeySpace) -> dict[str, ModelUsage]:
    """The `model_usage` hash of a run or team, per model (sorted by name)."""
    return parse_model_usage(conn.hgetall(keys.model_usage))


def parse_model_usage(fields: dict[Any, Any]) -> dict[str, ModelUsage]:
    """A `model_usage` hash as it was read, per model; unknown fields are left out."""
    grouped: dict[str, dict[str, Any]] = {}
    for raw_name, raw_value in fields.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
        model, _, metric = name.rpartition(" ")
        if model and metric in MODEL_METRICS:
            grouped.setdefault(model, {})[metric] = value
    return {model: ModelUsage.model_validate(grouped[model]) for model in sorted(grouped)}
