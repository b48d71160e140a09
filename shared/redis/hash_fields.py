"""Field types for records read from Redis hashes and stream entries, which hold flat strings
with '' for an absent value: every record in Redis is parsed by its model, never by hand."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _none_if_blank(value: Any) -> Any:
    return None if value == "" else value


def _zero_if_blank(value: Any) -> Any:
    return 0 if value == "" else value


def _split_csv(value: Any) -> Any:
    return [item for item in value.split(",") if item] if isinstance(value, str) else value


BLANK_IS_NONE = BeforeValidator(_none_if_blank)
"""For an optional field of any type read from Redis: '' means absent."""


HashText = Annotated[str | None, BLANK_IS_NONE]
"""Optional text ('' in Redis: absent)."""


HashInt = Annotated[int, BeforeValidator(_zero_if_blank)]
"""A count or a time in milliseconds ('' in Redis: 0)."""


HashCsv = Annotated[list[str], BeforeValidator(_split_csv)]
"""Ids stored as comma-separated text."""
