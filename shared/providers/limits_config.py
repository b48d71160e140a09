"""Configured provider limits: the team file's `[limits]` table and TEAMCTL_LIMITS.

Per model string, requests and tokens per minute; the effective limit of a model is the lowest
of these and what its provider announced (shared/providers/limit_headers.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationError
from teamctl.shared.errors import ConfigError


class ModelLimit(BaseModel):
    """A configured limit of one model string: requests and tokens per minute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: PositiveInt | None = None
    tpm: PositiveInt | None = None

    def lowest(self, other: ModelLimit | None) -> ModelLimit:
        """The lower of each limit this one and `other` set."""
        if other is None:
            return self
        return ModelLimit(rpm=_lowest(self.rpm, other.rpm), tpm=_lowest(self.tpm, other.tpm))


def _lowest(a: int | None, b: int | None) -> int | None:
    return min(a, b) if a is not None and b is not None else a if a is not None else b


LIMITS_FORMAT = "MODEL=rpm:N,tpm:N[;MODEL=...], e.g. openai/gpt-4o-mini=rpm:500,tpm:200000, or off"
LIMITER_OFF = "off"
"""TEAMCTL_LIMITS=off: calls take no shared slot and a 429 pauses only its caller (each
worker backs off alone, as before the limiter; budgets are still reserved). For comparisons."""


def parse_limits(text: str, source: str = "TEAMCTL_LIMITS") -> dict[str, ModelLimit]:
    """TEAMCTL_LIMITS: `MODEL=rpm:N,tpm:N` entries split by `;` (a model string may hold ':'
    and '/', never '=' or ';'); ConfigError (exit 2) saying how to fix."""
    limits: dict[str, ModelLimit] = {}
    if text.strip().lower() == LIMITER_OFF:
        return limits
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        model, sep, values = entry.rpartition("=")
        try:
            if not sep or not model.strip():
                raise ValueError("no MODEL=")
            pairs = [v.split(":", 1) for v in values.split(",") if v.strip()]
            fields = {k.strip(): int(v) for k, v in pairs}
            if not fields or set(fields) - {"rpm", "tpm"}:
                raise ValueError("only rpm and tpm")
            limits[model.strip()] = ModelLimit.model_validate(fields)
        except (ValueError, ValidationError):
            raise ConfigError(
                f"{source}: {entry!r} is not a limit; write {LIMITS_FORMAT}, or unset it"
            ) from None
    return limits


def merged(*sources: Mapping[str, ModelLimit]) -> dict[str, ModelLimit]:
    """Every model's lowest limits over `sources` (the team file's, the worker's)."""
    limits: dict[str, ModelLimit] = {}
    for source in sources:
        for model, limit in source.items():
            limits[model] = limit.lowest(limits.get(model))
    return limits
