"""Tool results that fit tool_result_max_chars: the pieces a run member's, a teammate's and the
lead's tools page or cut their answers with, so each says the same of what it left out.

A listing keeps the first items whose JSON fits (`fitting`); an item that alone does not fit has
its texts cut (`cut_texts`, `cut_to_fit`), each cut saying how long the text was. The Toolbox
caps whatever a tool answers in the end (tools.py `bounded_result`), for the tools that forget.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

CUT_NOTE_CHARS = 100
"""Room a cut text keeps for its note ("[truncated: the output has N characters; ...]")."""
SHRINK_ROUNDS = 4
"""How often a cut is made again when JSON escapes made the first too long."""


def json_chars(value: Any) -> int:
    """How many characters `value` takes as the JSON a tool result is."""
    return len(json.dumps(value, ensure_ascii=False))


def cut_note(what: str, total: int, kept: int) -> str:
    """What a cut text ends with: how long it was, and how much of it is shown."""
    return f"\n[truncated: the {what} has {total} characters; the first {kept} are shown]"


def cut_text(text: str, keep: int, what: str) -> str:
    """The first `keep` characters of `text` and the note saying so."""
    keep = max(keep, 0)
    return text[:keep] + cut_note(what, len(text), keep)


def fitting(views: list[dict[str, Any]], room: int) -> list[dict[str, Any]]:
    """The first views whose JSON (as list items) fits `room` characters; the first one always,
    for the caller to cut when it alone is too long."""
    kept: list[dict[str, Any]] = []
    used = 0
    for view in views:
        used += json_chars(view) + 2
        if kept and used > room:
            break
        kept.append(view)
    return kept


def cut_texts(
    texts: dict[str, str], room: int, names: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The texts within `room` characters together: the shorter kept whole where they fit, the
    longer cut to what is left, each cut saying how long it was (calling a text by its key,
    or by its name in `names`)."""
    if sum(len(text) for text in texts.values()) <= room:
        return texts
    out: dict[str, str] = {}
    left, count = max(room, 0), len(texts)
    for key, text in sorted(texts.items(), key=lambda item: len(item[1])):
        share = left // count
        count -= 1
        out[key] = (
            text
            if len(text) <= share
            else cut_text(text, share - CUT_NOTE_CHARS, (names or {}).get(key, key))
        )
        left -= len(out[key])
    return out


def cut_to_fit(
    item: dict[str, Any], keys: list[str], budget: int, names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`item` with its texts under `keys` cut (saying so, as cut_texts) until its JSON fits
    `budget` characters; as it is when it fits already. Nothing else of it is cut."""
    texts = {key: str(item[key]) for key in keys if item.get(key)}
    room = sum(len(text) for text in texts.values())
    fitted = item
    for _ in range(SHRINK_ROUNDS):  # JSON escapes may lengthen a text: shrink until it fits
        over = json_chars(fitted) - budget
        if over <= 0:
            break
        room = max(room - over, 0)
        fitted = {**item, **cut_texts(texts, room, names)}
    return fitted
