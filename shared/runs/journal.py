"""A task's step journal: each model reply of a member's session (with its usage) and each tool
result, recorded while the claim holds, so the task's next attempt after a crash (or after a
pause on a spent budget) replays them instead of paying for the calls and running the tools
again.

What can repeat: the one step in flight when the attempt died (its model call, and its tool
calls that had not started). Everything recorded is replayed, never made again. A tool call's
start is recorded before it runs: one that started and left no result is in doubt (it may or may
not have taken effect), and the next attempt runs it again only when the tool is safe to repeat;
any other gets an in-doubt note as its result (see in_doubt_text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
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
IN_DOUBT_MARKER = "[teamctl] in doubt:"
"""How the result of an in-doubt call that was not run again starts."""


class InDoubt(StrEnum):
    """What the attempt after a crash did with a tool call that started and left no result."""

    NOT_RERUN = "not re-run"
    """The tool is not known to be safe to repeat: the model was told instead."""
    RERUN = "re-run"
    """The tool is idempotent or read-only: it ran again, once."""


IN_DOUBT_LABELS = {
    InDoubt.NOT_RERUN: "in doubt: not re-run",
    InDoubt.RERUN: "in doubt: re-run (safe to repeat)",
}
"""How a transcript marks a tool result by its stored `in_doubt` mark."""


def in_doubt_label(mark: object) -> str:
    """A stored tool message's `in_doubt` mark as a transcript shows it: a fixed label, or ''
    for none or an unknown one (what is read back is never shown raw)."""
    for doubt, label in IN_DOUBT_LABELS.items():
        if mark == doubt.value:
            return label
    return ""


class JournalEntry(BaseModel):
    """One recorded step part: a model reply (`reply`), the start of one tool call (`start`,
    with the tool's name) or its result (`tool`, saying whether the call had been in doubt)."""

    kind: Literal["reply", "start", "tool"]
    member_id: str
    step: int
    reply: ModelReply | None = None
    call_id: str = ""
    content: str = ""
    tool: str = ""
    in_doubt: InDoubt | None = None


@dataclass
class RecordedStep:
    """A step as the journal has it: the reply, the tool calls that started (by id, with their
    tool's name), and the results of those that ended."""

    reply: ModelReply
    results: dict[str, str] = field(default_factory=dict)
    started: dict[str, str] = field(default_factory=dict)
    in_doubt: dict[str, InDoubt] = field(default_factory=dict)
    """The calls an attempt found in doubt, and what it did with each (kept for transcripts)."""

    def is_in_doubt(self, call_id: str) -> bool:
        """Whether call `call_id` started and left no result: it may or may not have acted."""
        return call_id in self.started and call_id not in self.results


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
            elif entry.kind == "start" and steps and entry.step == len(steps):
                steps[-1].started[entry.call_id] = entry.tool
            elif entry.kind == "tool" and steps and entry.step == len(steps):
                steps[-1].results[entry.call_id] = entry.content
                if entry.in_doubt is not None:
                    steps[-1].in_doubt[entry.call_id] = entry.in_doubt
        return steps

    def keep_first_steps(self, steps: int) -> None:
        """Drop what this run's own attempts added after a task's first `steps` steps (copied
        from a source run): a session released by choice starts over from there."""
        entries = self._entries()
        kept = next((i for i, e in enumerate(entries) if e.step > steps), len(entries))
        if kept < len(entries):
            self._run("trim", str(kept))

    def record_reply(self, member_id: str, step: int, reply: ModelReply) -> None:
        """Record step `step`'s reply, before any of its tools runs."""
        self._append(JournalEntry(kind="reply", member_id=member_id, step=step, reply=reply))

    def record_start(self, member_id: str, step: int, call_id: str, tool: str) -> None:
        """Record that tool call `call_id` (of `tool`) starts, right before it runs: a crash
        before its result leaves it in doubt, never silently run again."""
        self._append(
            JournalEntry(kind="start", member_id=member_id, step=step, call_id=call_id, tool=tool)
        )

    def record_result(
        self,
        member_id: str,
        step: int,
        call_id: str,
        content: str,
        in_doubt: InDoubt | None = None,
    ) -> None:
        """Record one tool call's result as it completes (and, for a call found in doubt,
        what was done with it)."""
        self._append(
            JournalEntry(
                kind="tool",
                member_id=member_id,
                step=step,
                call_id=call_id,
                content=content,
                in_doubt=in_doubt,
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


def complete_steps(entries: list[JournalEntry]) -> int:
    """How many steps from the first the entries record whole: the reply and a result of each
    of its tool calls (a journal cut at its cap may keep a reply without its results)."""
    replies: dict[int, ModelReply] = {}
    results: dict[int, set[str]] = {}
    for entry in entries:
        if entry.kind == "reply" and entry.reply is not None:
            replies.setdefault(entry.step, entry.reply)
        elif entry.kind == "tool":
            results.setdefault(entry.step, set()).add(entry.call_id)
    step = 0
    while (reply := replies.get(step + 1)) is not None and all(
        call.id in results.get(step + 1, set()) for call in reply.tool_calls
    ):
        step += 1
    return step


def in_doubt_text(tool: str, key: str) -> str:
    """The result an in-doubt call of `tool` gets instead of running again: what happened, and
    the idempotency key (`run:task:tool_call_id`) its first run was given, to check by."""
    return (
        f"{IN_DOUBT_MARKER} an earlier attempt started this call of {tool} and stopped before "
        "it returned; it may or may not have taken effect. Its idempotency key is "
        f"{key}. Check before calling it again."
    )
