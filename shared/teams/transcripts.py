"""A teammate's or the lead's conversation turn by turn (`teamctl team transcript`, the
dashboard): each turn marks where in the member's memory it begins and how it ends
(turn_mark.lua, fenced as the member's checkpoints are), and the reader splits the memory at those
marks into what each turn was given (its inbox lines, a prompt), what its model answered, the
tools it called and what they returned. All of it is model-written or model-bound text: whoever
shows it makes it printable."""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from teamctl.shared.bus import LEAD
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import TeamKeys
from teamctl.shared.teams.team_base import TeamBase

TURNS_KEPT_PER_MESSAGE = 4
"""A member's turns stream keeps about this many entries per message its memory may hold (two
per turn, with room for turns that ended before a model call and so hold no message)."""

INBOX_OPEN = "<inbox>\n"
INBOX_CLOSE = "\n</inbox>"


@dataclass(frozen=True)
class MemoryKeys:
    """Where one member's conversation lives: its fence (the turn or lead lease), memory, size
    record (with its field prefix there) and turns stream."""

    fence: str
    memory: str
    size: str
    prefix: str
    turns: str


def memory_keys(keys: TeamKeys, member: str) -> MemoryKeys:
    """The keys of a teammate's conversation, or of the lead's (`member` = 'lead')."""
    if member == LEAD:
        return MemoryKeys(
            keys.lead_lease, keys.lead_memory, keys.lead_memory_size, "", keys.lead_turns
        )
    return MemoryKeys(
        keys.turn(member), keys.memory(member), keys.teammate(member), "memory_", keys.turns(member)
    )


def mark_turn(store: TeamBase, member: str, token: str, kind: str, detail: str) -> int | None:
    """Record that the member's turn begins (`detail`: who runs it) or ends (`detail`: how),
    fenced by its `token` (the lead's: its lease owner); the turn's number, or None when the
    token no longer holds (nothing written)."""
    at = memory_keys(store.keys, member)
    turn = int(
        store.scripts["turn_mark"](
            keys=[at.fence, at.memory, at.size, at.turns],
            args=[
                token,
                at.prefix,
                kind,
                detail,
                TURNS_KEPT_PER_MESSAGE * store.options.memory_max_messages,
            ],
        )
    )
    return None if turn < 0 else turn


class EntryKind(StrEnum):
    USER = "user"
    """A user message that is no inbox line: a teammate's spawn prompt, the person's line."""
    INBOX = "inbox"
    """One message of an `<inbox>` block the turn was given."""
    REPLY = "reply"
    """The text of a model reply."""
    CALL = "call"
    """One tool call of a model reply, with its arguments as the model wrote them."""
    RESULT = "result"
    """What one tool call returned to the model."""


class TranscriptEntry(BaseModel):
    """One thing a turn was given, said or did, in order."""

    kind: EntryKind
    text: str = ""
    """The message's content, the reply's text, the call's arguments (raw JSON), the result."""
    name: str | None = None
    """The tool's name (call, result)."""
    call_id: str | None = None
    """The tool call's id (call, result)."""
    sender: str | None = None
    """Who sent an inbox message."""
    type: str | None = None
    """An inbox message's type."""
    message_id: str | None = None
    """An inbox message's id on the team's bus."""


class TranscriptTurn(BaseModel):
    """One turn and what of it memory still holds."""

    turn: int | None
    """Its number since the memory began (a re-spawn or `lead --new` starts again at 1); None
    for messages from before any turn was recorded."""
    started_ms: int | None = None
    ended_ms: int | None = None
    ended: str | None = None
    """How it ended (an idle reason: done, step_limit, time_limit, budget, error: ...); None
    when no end is recorded (it runs now, or its process stopped)."""
    running: bool = False
    """No end is recorded and it is the last turn while its member's turn (or lead) is live."""
    worker: str | None = None
    """The process that ran it (host:pid)."""
    cut: bool = False
    """Its first messages left memory (memory_max_messages, memory_max_chars)."""
    entries: list[TranscriptEntry] = []


class Transcript(BaseModel):
    """A member's conversation as memory holds it, turn by turn, oldest first."""

    team: str
    member: str
    turns: list[TranscriptTurn] = []

    def numbers(self) -> list[int]:
        """The numbers of the turns it holds."""
        return [t.turn for t in self.turns if t.turn is not None]

    def only(self, number: int) -> Transcript:
        """The transcript of turn `number` alone; ConfigError naming the turns it holds."""
        chosen = [t for t in self.turns if t.turn == number]
        if not chosen:
            held = number_ranges(self.numbers()) or "none yet"
            raise ConfigError(
                f"{self.member} of team {self.team} has no turn {number} in its "
                f"memory; its turns: {held}"
            )
        return self.model_copy(update={"turns": chosen})


def number_ranges(numbers: list[int]) -> str:
    """Sorted numbers as `1-4, 7, 9-10`: a long run of turns named in a few characters."""
    spans: list[list[int]] = []
    for number in sorted(set(numbers)):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass(frozen=True)
class Mark:
    """One entry of a turns stream."""

    ms: int
    kind: str
    turn: int
    at: int
    detail: str


def load_transcript(store: TeamBase, member: str) -> Transcript:
    """The member's transcript (the lead's for 'lead'), read in one transaction, writing
    nothing; ConfigError for a team or teammate that does not exist."""
    store.meta()
    if member != LEAD:
        store.get(member)  # one line naming the team's teammates for an unknown name
    at = memory_keys(store.keys, member)
    pipe = store.conn.pipeline(transaction=True)
    pipe.lrange(at.memory, 0, -1)
    pipe.hmget(at.size, [at.prefix + "seq", "epoch"])
    pipe.xrange(at.turns)
    pipe.exists(at.fence)
    raw_memory, (seq, epoch), raw_marks, live = pipe.execute()
    memory = [json.loads(raw) for raw in raw_memory]
    base = max(0, (len(memory) if seq is None else int(seq)) - len(memory))
    marks = [
        mark for mark in map(read_mark, raw_marks) if mark is not None and mark[0] == (epoch or "0")
    ]
    turns = split_turns(memory, base, [m for _, m in marks], bool(live))
    return Transcript(team=store.team, member=member, turns=turns)


def read_mark(entry: tuple[str, dict[str, str]]) -> tuple[str, Mark] | None:
    """A turns stream entry as (its memory's epoch, the mark); None for one that does not
    parse (written by a later version, say)."""
    entry_id, fields = entry
    try:
        return fields.get("epoch", "0"), Mark(
            ms=int(entry_id.split("-")[0]),
            kind=fields["kind"],
            turn=int(fields["turn"]),
            at=int(fields["at"]),
            detail=fields.get("detail", ""),
        )
    except (KeyError, ValueError):
        return None


def split_turns(
    memory: list[dict[str, Any]], base: int, marks: list[Mark], live: bool
) -> list[TranscriptTurn]:
    """Memory's messages (the first numbered `base` since the memory began) under the turns
    that committed them, oldest first; a turn that holds no message shows when it began after
    memory's first message (one that ended before a model call), not when the caps dropped it."""
    begins = {m.turn: m for m in marks if m.kind == "begin"}
    ends = {m.turn: m for m in marks if m.kind == "end"}
    order = sorted(begins, key=lambda n: (begins[n].at, n))
    # A teammate's spawn prompt is committed before its first turn begins: that turn's input.
    starts = [0 if n == 1 and i == 0 else begins[n].at for i, n in enumerate(order)]
    owners = [
        order[place] if place >= 0 else None
        for place in (
            bisect.bisect_right(starts, base + offset) - 1 for offset in range(len(memory))
        )
    ]
    turns = {
        n: turn_view(n, begins[n], ends.get(n), live and n == order[-1], cut=start < base)
        for n, start in zip(order, starts, strict=True)
        if start >= base or n in owners
    }
    loose = TranscriptTurn(turn=None)  # messages from before any recorded turn
    for owner, message in zip(owners, memory, strict=True):
        (loose if owner is None else turns[owner]).entries.extend(message_entries(message))
    return ([loose] if None in owners else []) + list(turns.values())


def turn_view(
    number: int, begin: Mark, end: Mark | None, last_live: bool, *, cut: bool
) -> TranscriptTurn:
    """A turn's header fields from its marks."""
    return TranscriptTurn(
        turn=number,
        started_ms=begin.ms,
        worker=begin.detail or None,
        ended_ms=end.ms if end else None,
        ended=end.detail if end else None,
        running=end is None and last_live,
        cut=cut,
    )


def message_entries(message: dict[str, Any]) -> list[TranscriptEntry]:
    """What one memory message holds, as entries: a user message's text and inbox lines, a
    reply's text and tool calls, a tool's result."""
    role, text = message.get("role"), as_text(message.get("content"))
    if role == "tool":
        return [
            TranscriptEntry(
                kind=EntryKind.RESULT,
                text=text,
                name=as_text(message.get("name")) or None,
                call_id=as_text(message.get("tool_call_id")) or None,
            )
        ]
    if role != "assistant":
        return user_entries(text)
    entries = [TranscriptEntry(kind=EntryKind.REPLY, text=text)] if text.strip() else []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        entries.append(
            TranscriptEntry(
                kind=EntryKind.CALL,
                name=as_text(function.get("name")) or "?",
                call_id=as_text(call.get("id")) or None,
                text=as_text(function.get("arguments")),
            )
        )
    return entries


def as_text(value: object) -> str:
    """A message field as text: a string as it is, anything else as JSON ('' for none)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def user_entries(content: str) -> list[TranscriptEntry]:
    """A user message as its own text (a prompt, the person's line) and the lines of the
    `<inbox>` block that ends it (shared/teams/inbox.py; its JSON lines hold no raw newline,
    so the block's opening tag is the last one)."""
    said, lines = content, []
    start = content.rfind(INBOX_OPEN)
    if content.endswith(INBOX_CLOSE) and start >= 0:
        said = content[:start]
        lines = content[start + len(INBOX_OPEN) : -len(INBOX_CLOSE)].split("\n")
    entries = [TranscriptEntry(kind=EntryKind.USER, text=said.strip())] if said.strip() else []
    return entries + [inbox_entry(line) for line in lines if line.strip()]


def inbox_entry(line: str) -> TranscriptEntry:
    """One inbox line (id, from, type, content); a line that is no such object, as it is."""
    try:
        fields = json.loads(line)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        return TranscriptEntry(kind=EntryKind.INBOX, text=line)
    return TranscriptEntry(
        kind=EntryKind.INBOX,
        text=as_text(fields.get("content")),
        sender=as_text(fields.get("from")) or None,
        type=as_text(fields.get("type")) or None,
        message_id=as_text(fields.get("id")) or None,
    )
