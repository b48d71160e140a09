"""Members' raw transcripts: the messages and tool results of the attempt that ended each task,
stored once per task beside the board, capped, and written only while the claim holds."""

from __future__ import annotations

import json
from typing import Any

import redis
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import GuardedScripts, Scripts

LOAD_PAGE_KEYS = 100
"""Transcripts per MGET when many are loaded at once."""
HEAD_MESSAGES = 2
"""The system prompt and the dispatch input: always kept, they say what the member was asked."""


class Transcripts:
    """The transcripts of one run's tasks."""

    def __init__(
        self, conn: redis.Redis, keys: RunKeys, scripts: Scripts | GuardedScripts | None = None
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts or Scripts(conn)

    def save(
        self, task_id: str, token: str, messages: list[dict[str, Any]] | None, max_chars: int
    ) -> bool:
        """Keep `messages` (capped) as the task's transcript, or none for an attempt that never
        started its session (an earlier attempt's is removed); False if the claim was lost."""
        if max_chars <= 0:
            return True
        text = (
            "" if messages is None else json.dumps(capped(messages, max_chars), ensure_ascii=False)
        )
        saved: bool = (
            self.scripts["transcript_save"](
                keys=[self.keys.task(task_id), self.keys.transcript(task_id)], args=[token, text]
            )
            == "ok"
        )
        return saved

    def load_many(self, task_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The stored transcripts of these tasks, by task id (tasks without one are left out)."""
        if not task_ids:
            return {}
        # In pages, pipelined: one MGET of a big run's transcripts would block Redis for long.
        pipe = self.conn.pipeline(transaction=False)
        for at in range(0, len(task_ids), LOAD_PAGE_KEYS):
            pipe.mget([self.keys.transcript(t) for t in task_ids[at : at + LOAD_PAGE_KEYS]])
        texts = [text for page in pipe.execute() for text in page]
        return {
            task_id: json.loads(text) for task_id, text in zip(task_ids, texts, strict=True) if text
        }


def capped(messages: list[dict[str, Any]], max_chars: int) -> list[dict[str, Any]]:
    """The messages whose JSON (the list, as stored) fits `max_chars`: the first two, their
    text cut if need be, then as many of the latest as fit, with a note saying how many in
    between were left out (none when none were). Never longer than `max_chars`: the note's
    room is kept before the latest messages are counted."""
    if _json_len(messages) <= max_chars:
        return messages
    head = [_shortened(m, max_chars // (2 * HEAD_MESSAGES)) for m in messages[:HEAD_MESSAGES]]
    room = max_chars - _json_len([*head, _note(len(messages), max_chars)])
    if room < 0:  # too small even for the head: the note alone, if that fits
        note = [_note(len(messages), max_chars)]
        return note if _json_len(note) <= max_chars else []
    tail: list[dict[str, Any]] = []
    for message in reversed(messages[HEAD_MESSAGES:]):
        size = _json_len([message]) - 2 + len(", ")  # its text and the separator before it
        if size > room:
            break
        tail.insert(0, message)
        room -= size
    left_out = len(messages) - len(head) - len(tail)
    if not left_out:
        return [*head, *tail]
    return [*head, _note(left_out, max_chars), *tail]


def _note(left_out: int, max_chars: int) -> dict[str, Any]:
    return {
        "role": "teamctl",
        "content": f"{left_out} messages left out (transcript_max_chars={max_chars})",
    }


def _json_len(messages: list[dict[str, Any]]) -> int:
    """The length of `messages` as the transcript stores them."""
    return len(json.dumps(messages, ensure_ascii=False))


def _shortened(message: dict[str, Any], max_chars: int) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and len(content) > max_chars:
        return {**message, "content": content[:max_chars] + " [cut]"}
    return message
