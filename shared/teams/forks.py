"""`teamctl team fork`: a new teammate whose memory is another's as it stood after one of its
turns, with the other's grants (never wider), to try another model or message on that history.

No copy is torn by a turn running meanwhile, and none blocks Redis for long: the messages up to
where the chosen turn ended never change (a turn only appends, the caps only drop the oldest), so
they are read a page at a time, each page in one transaction that also reads where memory now
begins; a page that finds the oldest ones dropped meanwhile starts the copy again. The pages and
the turns' marks go to staging keys that team_fork.lua renames into place with the fork's
record, so the fork appears whole or not at all.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from teamctl.shared.bus import LEAD
from teamctl.shared.errors import ConfigError, TeamError
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import SNAPSHOT_RETRIES
from teamctl.shared.teams.team_base import TeamBase, TeammateBusy
from teamctl.shared.teams.teammates import (
    ForkOrigin,
    Teammate,
    TeammateStatus,
    check_teammate_name,
)
from teamctl.shared.teams.transcripts import Mark, number_ranges, read_mark
from teamctl.shared.text import quoted

MEMORY_PAGE_MESSAGES = 64
"""Messages one read of the source's memory copies: each read is one short transaction."""
MARKS_PAGE_ENTRIES = 500
"""Entries one read of the source's turns stream takes."""
STAGING_TTL_MS = 600_000
"""How long a staged copy outlives a fork command that stopped before renaming it into place."""
FORK_EPOCH = 1
"""A fork's memory is its first life, as a spawned teammate's is."""


@dataclass(frozen=True)
class StagedMemory:
    """The copied memory's size record: where it begins (its first message's number since the
    source's memory began), its characters, and the index of its last user message."""

    base: int
    chars: int
    last_user: int


@dataclass(frozen=True)
class Staged:
    """The keys one fork command copies into before they become the fork's."""

    memory: str
    turns: str


@dataclass(frozen=True)
class TurnMark:
    """One entry of the source's turns stream, parsed, with its id (kept in the copy)."""

    entry_id: str
    mark: Mark


class TeamForks:
    """The store's fork part, on the records every part shares (`store`)."""

    def __init__(self, store: TeamBase) -> None:
        self.store = store
        self.conn = store.conn
        self.keys = store.keys

    def fork(
        self,
        name: str,
        new: str,
        *,
        at_turn: int | None = None,
        model: str | None = None,
        role: str | None = None,
    ) -> Teammate:
        """Add `new`, idle, with `name`'s memory as it stood after turn `at_turn` (default: its
        last ended turn) and `name`'s grants; its turns count on from that turn. `model` must be
        one `name` may call or the team grants; `role` replaces `name`'s. ConfigError for bad
        input, TeammateBusy when the turn asked for runs now."""
        source = self.source(name)
        check_teammate_name(new)
        if self.conn.exists(self.keys.teammate(new)):
            raise self.taken(new)
        chosen = fork_model(source, self.store.options, model)
        nonce = secrets.token_hex(6)
        staged = Staged(self.keys.fork_memory(new, nonce), self.keys.fork_turns(new, nonce))
        try:
            turn, memory, marks = self._copy(source, at_turn, staged.memory)
            self._stage_marks(marks, turn, staged.turns)
            fork = Teammate(
                name=new,
                role=source.role if role is None else role,
                prompt=source.prompt,
                status=TeammateStatus.IDLE,
                model=chosen,
                api_base=source.api_base,
                queue=source.queue,
                tools=source.tools,
                mcp=source.mcp,
                workspace=source.workspace,
                fallbacks=[m for m in source.fallbacks if m != chosen],
                plan_state="required" if source.plan_state else None,
                forked_from=ForkOrigin(teammate=name, turn=turn),
            )
            verdict = self._add(fork, self.end_seq(marks, turn), memory, staged)
        finally:  # nothing left behind by a refused or interrupted fork (renamed keys are gone)
            self.conn.delete(staged.memory, staged.turns)
        if verdict == "exists":
            raise self.taken(new)
        if verdict == "full":
            raise ConfigError(
                f"team {self.store.team} has {self.store.options.max_teammates} teammates, "
                "its limit (max_teammates); delete the team or use another"
            )
        if verdict == "lost":
            raise TeamError(f"the copy of {name}'s memory expired before it was kept; try again")
        return self.store.get(new)

    def taken(self, new: str) -> ConfigError:
        """The refusal of a fork's name that a teammate has."""
        return ConfigError(
            f"teammate {new} exists in team {self.store.team}; name the fork something else"
        )

    def _add(self, fork: Teammate, end_seq: int, memory: StagedMemory, staged: Staged) -> str:
        """Run team_fork.lua: the staged copy renamed into place under `fork`'s record (its
        memory's seq `end_seq`, the turn it was forked after as its turns so far)."""
        origin = fork.forked_from
        assert origin is not None  # every fork says where it came from
        verdict: str = self.store.scripts["team_fork"](
            keys=[
                self.keys.teammate(fork.name),
                self.keys.memory(fork.name),
                self.keys.turns(fork.name),
                self.keys.roster,
                self.keys.roster_ver,
                self.keys.events,
                staged.memory,
                staged.turns,
            ],
            args=[
                fork.name,
                fork.role,
                fork.prompt,
                fork.model,
                fork.api_base or "",
                fork.queue,
                self.store.options.max_teammates,
                fork.plan_state or "",
                ",".join(fork.tools),
                fork.workspace or "",
                ",".join(fork.mcp),
                ",".join(fork.fallbacks),
                end_seq,
                origin.turn,
                memory.chars,
                memory.last_user,
                origin.model_dump_json(),
                f"forked from {origin.teammate} after turn {origin.turn}",
            ],
        )
        return verdict

    def source(self, name: str) -> Teammate:
        """The teammate to fork; ConfigError for the lead or a name not in the team."""
        if name == LEAD:
            raise ConfigError(
                "the lead cannot be forked (its memory and tools are no teammate's); fork one of "
                "the team's teammates"
            )
        return self.store.get(name)

    def _copy(
        self, source: Teammate, at_turn: int | None, staged: str
    ) -> tuple[int, StagedMemory, list[TurnMark]]:
        """The turn forked after, its memory copied to `staged`, and the source's turn marks;
        tried again while the memory caps drop the oldest messages under the copy."""
        for _ in range(SNAPSHOT_RETRIES):
            marks = self.marks(source)
            base = self.oldest(source)
            turn = self.fork_turn(source, marks, base, at_turn)
            memory = self.copy_memory(source, self.end_seq(marks, turn), staged)
            if memory is not None:
                return turn, memory, marks
        raise TeamError(
            f"{source.name}'s memory kept being cut while it was copied; try again (or fork "
            "after a later turn)"
        )

    def marks(self, source: Teammate) -> list[TurnMark]:
        """The marks of the source's current memory (its epoch), oldest first, read a page at a
        time (the stream only grows at its end)."""
        found: list[TurnMark] = []
        start = "-"
        epoch = str(source.epoch)
        while True:
            page = self.conn.xrange(
                self.keys.turns(source.name), start, "+", count=MARKS_PAGE_ENTRIES
            )
            for entry in page:
                parsed = read_mark(entry)
                if parsed is not None and parsed[0] == epoch:
                    found.append(TurnMark(entry[0], parsed[1]))
            if len(page) < MARKS_PAGE_ENTRIES:
                return found
            start = f"({page[-1][0]}"

    def oldest(self, source: Teammate) -> int:
        """The number of the source's oldest message still in memory (since it began)."""
        pipe = self.conn.pipeline(transaction=True)
        pipe.hget(self.keys.teammate(source.name), "memory_seq")
        pipe.llen(self.keys.memory(source.name))
        seq, length = pipe.execute()
        return memory_base(seq, int(length))

    def fork_turn(
        self, source: Teammate, marks: list[TurnMark], base: int, at_turn: int | None
    ) -> int:
        """The turn to fork after: `at_turn`, or the last ended one; it must have ended with
        some of its memory still held. ConfigError naming those that did, TeammateBusy for the
        turn running now."""
        ended = self.ends(marks)
        forkable = sorted(n for n, at in ended.items() if at > base)
        held = number_ranges(forkable) or "none yet"
        last_begun = max((t.mark.turn for t in marks if t.mark.kind == "begin"), default=0)
        running = source.status is TeammateStatus.WORKING and last_begun not in ended
        if at_turn is None:
            if forkable:
                return forkable[-1]
            if running:
                raise TeammateBusy(
                    f"{source.name} has not ended a turn yet; fork it once it is idle"
                )
            raise ConfigError(
                f"{source.name} of team {self.store.team} has no ended turn in its memory to "
                "fork after"
            )
        if at_turn in forkable:
            return at_turn
        if running and at_turn == last_begun:
            raise TeammateBusy(
                f"turn {at_turn} of {source.name} is running; fork after it once it ends, or "
                f"after one of its ended turns: {held}"
            )
        raise ConfigError(
            f"{source.name} of team {self.store.team} has no ended turn {at_turn} in its "
            f"memory to fork after; its ended turns: {held}"
        )

    @staticmethod
    def ends(marks: list[TurnMark]) -> dict[int, int]:
        """Each ended turn's number, with the memory's seq where it ended."""
        return {t.mark.turn: t.mark.at for t in marks if t.mark.kind == "end"}

    def end_seq(self, marks: list[TurnMark], turn: int) -> int:
        """Where in the source's memory (messages since it began) `turn` ended."""
        return self.ends(marks)[turn]

    def copy_memory(self, source: Teammate, end_seq: int, staged: str) -> StagedMemory | None:
        """Copy the source's memory, from its oldest message to message `end_seq` (excluded),
        to the `staged` list a page at a time; None (nothing kept) when the caps dropped
        messages between two pages. TeamError when the source was re-spawned meanwhile."""
        self.conn.delete(staged)
        base: int | None = None
        copied = chars = 0
        last_user = -1
        while base is None or base + copied < end_seq:
            pipe = self.conn.pipeline(transaction=True)
            pipe.hmget(self.keys.teammate(source.name), ["memory_seq", "epoch"])
            pipe.llen(self.keys.memory(source.name))
            pipe.lrange(self.keys.memory(source.name), copied, copied + MEMORY_PAGE_MESSAGES - 1)
            (seq, epoch), length, page = pipe.execute()
            if int(epoch or 0) != source.epoch:
                raise TeamError(
                    f"{source.name} was re-spawned while its memory was copied; fork again"
                )
            now_base = memory_base(seq, int(length))
            if base is None:
                base = now_base
            wanted = end_seq - base - copied
            if now_base != base or wanted <= 0 or not page:
                return None  # the oldest messages went (or the turn did): start again
            page = page[:wanted]
            for offset, raw in enumerate(page):
                chars += len(raw)  # characters of the JSON text, as memory.lua counts them
                if is_user_message(raw):
                    last_user = copied + offset
            pipe = self.conn.pipeline(transaction=False)
            pipe.rpush(staged, *page)
            pipe.pexpire(staged, STAGING_TTL_MS)
            pipe.execute()
            copied += len(page)
        return StagedMemory(base, chars, last_user)

    def _stage_marks(self, marks: list[TurnMark], turn: int, staged: str) -> None:
        """The marks of turns up to `turn` to the `staged` stream, under their own ids and the
        fork's epoch, so its transcript shows the history's turns as the source's does."""
        kept = [t for t in marks if t.mark.turn <= turn]
        for first in range(0, len(kept), MARKS_PAGE_ENTRIES):
            pipe = self.conn.pipeline(transaction=False)
            for t in kept[first : first + MARKS_PAGE_ENTRIES]:
                pipe.xadd(
                    staged,
                    {
                        "kind": t.mark.kind,
                        "turn": t.mark.turn,
                        "epoch": FORK_EPOCH,
                        "at": t.mark.at,
                        "detail": t.mark.detail,
                    },
                    id=t.entry_id,
                )
            pipe.pexpire(staged, STAGING_TTL_MS)
            pipe.execute()


def fork_model(source: Teammate, options: TeamOptions, requested: str | None) -> str:
    """The fork's model: the source's, or `requested` when the source may call it already (a
    fallback) or the team grants it ([teammates] grantable_models); ConfigError otherwise."""
    if requested is None or requested == source.model:
        return source.model
    allowed = list(dict.fromkeys([source.model, *source.fallbacks, *options.grantable_models]))
    if requested not in allowed:
        raise ConfigError(
            f"model {quoted(requested)} is not granted to a fork of {source.name}; it may use "
            f"{', '.join(allowed)} (its own model, its fallbacks and the team file's [teammates] "
            "grantable_models)"
        )
    return requested


def memory_base(seq: str | None, length: int) -> int:
    """The number of a memory's oldest message since it began, from its size record's `seq`
    (messages committed since; None for a memory older than the count: it has its length)
    and its length."""
    return max(0, (length if seq is None else int(seq)) - length)


def is_user_message(raw: str) -> bool:
    """Whether a memory message (JSON) is a user's, as memory.lua tells them apart."""
    try:
        message = json.loads(raw)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("role") == "user"
