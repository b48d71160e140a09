"""An example Python tool for a team file (docs/guides/python-tools.md): a lookup in a table.

A real tool would call a service or a database; the typed signature is what the model sees."""

from __future__ import annotations

from typing import Literal

Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday"]
ROTA: dict[str, str] = {
    "monday": "ana",
    "tuesday": "bo",
    "wednesday": "cy",
    "thursday": "di",
    "friday": "ed",
}


def who_is_on_call(day: Weekday) -> str:
    """Say who is on call on a weekday.

    Args:
        day: The weekday, in lowercase.
    """
    return f"{ROTA[day]} is on call on {day}"
