"""A task's step journal: each model reply of a member's session (with its usage) and each tool
result, recorded while the claim holds, so the task's next attempt after a crash (or after a
pause on a spent budget) replays them instead of paying for the calls and running the tools
again.

What can repeat: the one step in flight when the attempt died (its model call, and any of its
tool calls that had not finished). Everything recorded is replayed, never made again."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import redis
from pydantic import BaseModel
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import GuardedScripts, Scripts

STALE, FULL = "stale", "full"
"""journal_append.lua's verdicts for a lost claim and a journal at its cap (else 'ok')."""
PAGE_ENTRIES = 100
"""Entries per LRANGE: a long journal is read in pages, never in one long command."""


class JournalEntry(BaseModel):
    """One recorded step part: a model reply (`reply`) or one tool call's result."""

    kind: Literal["reply", "tool"]
    member_id: str
    step: int
    reply: ModelReply | None = None
    call_id: str = ""
    content: str = ""


@dataclass
class RecordedStep:
    """A step as the journal has it: the reply, and the results of the tool calls that ended."""

    reply: ModelReply
    results: dict[str, str] = field(default_factory=dict)


class AppendRefused(RuntimeError):
    """The claim the journal is fenced by was lost: the attempt must stop."""


class StepJournal:
    """The journal of one task, written with one claim's token."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: RunKeys,
        task_id: str,
        token: str,
        max_bytes: int,
        scripts: Scripts | GuardedScripts | None = None,
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.task_id = task_id
        self.token = token
        self.max_bytes = max_bytes
        self.scripts = scripts or Scripts(conn)
        self.full = False
        """Set once an entry did not fit: nothing more is recorded (replay stops there)."""
        self.lost = False
        """Set once an append was refused (the claim was lost): nothing more is recorded."""

    def steps_for(self, member_id: str, *, crashed: bool) -> list[RecordedStep]:
        """The recorded steps of `member_id`'s session, in order, when the attempt before this
        one died or gave the task back on a spent budget (`crashed`: TaskState.reclaimed, set
        by reclaim.lua and release_budget.lua).
        Else the journal is dropped: a released task starts over by choice, and a handed-off
        one is another member's session."""
        if not crashed:  # nothing to read: only to drop, if there is one
            if self.conn.exists(self.keys.journal(self.task_id)):
                self._run("reset")
            return []
        entries = self._entries()
        if any(e.member_id != member_id for e in entries):
            self._run("reset")
            return []
        steps: list[RecordedStep] = []
        for entry in entries:
            if entry.kind == "reply" and entry.reply is not None and entry.step == len(steps) + 1:
                steps.append(RecordedStep(entry.reply))
            elif entry.kind == "tool" and steps and entry.step == len(steps):
                steps[-1].results[entry.call_id] = entry.content
        return steps

    def record_reply(self, member_id: str, step: int, reply: ModelReply) -> None:
        """Record step `step`'s reply, before any of its tools runs."""
        self._append(JournalEntry(kind="reply", member_id=member_id, step=step, reply=reply))

    def record_result(self, member_id: str, step: int, call_id: str, content: str) -> None:
        """Record one tool call's result as it completes."""
        self._append(
            JournalEntry(
                kind="tool", member_id=member_id, step=step, call_id=call_id, content=content
            )
        )

    def note_replayed(self, steps: int) -> None:
        """Say on the task how many steps this attempt replayed (`teamctl tasks` shows it)."""
        self._run("replayed", str(steps))

    def _append(self, entry: JournalEntry) -> None:
        """Add an entry; refused for a lost claim, it records nothing more and lets the
        attempt's own claim checks (which count the stale write) stop it."""
        if self.full or self.lost or self.max_bytes <= 0:
            return
        verdict = self._call(
            "append", entry.model_dump_json(exclude_defaults=True), str(self.max_bytes)
        )
        self.lost = verdict == STALE
        self.full = verdict == FULL

    def _run(self, op: str, *args: str) -> str:
        """A journal change the attempt cannot go on without (AppendRefused: claim lost)."""
        verdict = self._call(op, *args)
        if verdict == STALE:
            raise AppendRefused(f"claim lost: the task {self.task_id} was reclaimed")
        return verdict

    def _call(self, op: str, *args: str) -> str:
        return str(
            self.scripts["journal_append"](
                keys=[self.keys.task(self.task_id), self.keys.journal(self.task_id)],
                args=[self.token, op, *args],
            )
        )

    def _entries(self) -> list[JournalEntry]:
        return journal_entries(self.conn, self.keys, self.task_id)


def journal_entries(conn: redis.Redis, keys: RunKeys, task_id: str) -> list[JournalEntry]:
    """A task's journal as it stands, read in pages (any run's: a fork reads its source's)."""
    key = keys.journal(task_id)
    entries: list[JournalEntry] = []
    start = 0
    while True:
        page = conn.lrange(key, start, start + PAGE_ENTRIES - 1)
        entries += [JournalEntry.model_validate_json(raw) for raw in page]
        if len(page) < PAGE_ENTRIES:
            return entries
        start += PAGE_ENTRIES


def step_count(entries: list[JournalEntry]) -> int:
    """How many model replies (steps) the entries record."""
    return sum(entry.kind == "reply" for entry in entries)
