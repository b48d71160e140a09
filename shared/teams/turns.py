"""A persistent team's turn writes, made by the worker that runs a turn: its lease, its memory and
the checkpoint of each step, and its end."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from teamctl.shared.bus import LEAD
from teamctl.shared.teams.tasks import LANE_HEAD, SNAPSHOT_RETRIES, TeamTasks, until_current
from teamctl.shared.teams.team_base import TeamBase


class TeamTurns:
    """The store's turn part, on the records every part shares (`store`): every write is
    token-checked, so a revoked turn changes nothing."""

    def __init__(self, store: TeamBase) -> None:
        self.store = store
        self.conn = store.conn
        self.keys = store.keys
        self.scripts = store.scripts

    def begin_turn(self, name: str, worker: str) -> tuple[str, str]:
        """('ok', token) with the turn lease taken; ('busy'|'skip', '') otherwise."""
        verdict, token = self.scripts["turn_begin"](
            keys=[self.keys.teammate(name), self.keys.turn(name), self.keys.tokens],
            args=[int(self.store.options.heartbeat_ttl_s * 1000), worker],
        )
        return verdict, token

    def refresh_turn(self, name: str, token: str) -> bool:
        """Extend the turn lease; False once the token no longer holds it."""
        verdict: str = self.scripts["turn_heartbeat"](
            keys=[self.keys.turn(name), self.keys.teammate(name)],
            args=[token, int(self.store.options.heartbeat_ttl_s * 1000)],
        )
        return verdict == "ok"

    def hand_over(self, name: str, token: str) -> bool:
        """Give a working teammate's next turn to a fresh job (this one ran long); False for a
        revoked turn (nothing changes)."""
        if (
            self.scripts["turn_handover"](
                keys=[self.keys.turn(name), self.keys.teammate(name), self.keys.events],
                args=[token, name],
            )
            != "ok"
        ):
            return False
        self.store.scheduler.enqueue_turn(self.store.get(name))
        return True

    def memory(self, name: str) -> list[dict[str, Any]]:
        """The teammate's chat messages, oldest first."""
        return [json.loads(raw) for raw in self.conn.lrange(self.keys.memory(name), 0, -1)]

    def checkpoint(
        self, name: str, token: str, offset_id: str, messages: Sequence[dict[str, Any]]
    ) -> bool:
        """Commit a step (see `commit_step`); False (nothing written) for a revoked turn."""
        return self.commit_step(name, token, offset_id, messages) is not None

    def commit_step(
        self, name: str, token: str, offset_id: str, messages: Sequence[dict[str, Any]]
    ) -> int | None:
        """Commit a step: its messages to memory (capped at memory_max_messages and
        memory_max_chars, oldest whole exchanges first) and the inbox offset to `offset_id` (''
        keeps it), in one token-checked call. Returns how many of memory's oldest messages the
        caps dropped, so a turn drops them from the conversation it holds too; None (nothing
        written) for a revoked turn."""
        dropped = int(
            self.scripts["turn_checkpoint"](
                keys=[
                    self.keys.turn(name),
                    self.keys.memory(name),
                    self.keys.read_offsets,
                    self.keys.teammate(name),
                    self.keys.effects(name),
                ],
                args=[
                    token,
                    name,
                    offset_id,
                    self.store.options.memory_max_messages,
                    self.store.options.memory_max_chars,
                    *(json.dumps(m, ensure_ascii=False) for m in messages),
                ],
            )
        )
        return None if dropped < 0 else dropped

    def end_turn(
        self,
        name: str,
        token: str,
        reason: str,
        notice: str,
        *,
        force: bool = False,
        error: str = "",
        budget: bool = False,
    ) -> str:
        """'continue' (mail arrived, a task reminder, or a task claimed for it: go on), 'idle'
        (ended, lead told), 'shutdown' or 'stale'. `force` ends a failed turn; `budget` one the
        team's spent budget stopped (its tasks go back uncounted against their releases).
        Tasks the end released go to idle teammates."""
        mode = "budget" if budget else "1" if force else "0"
        tasks = TeamTasks(self.store)
        tasks.index_lanes()
        role = self.conn.hget(self.keys.teammate(name), "role")
        depth = LANE_HEAD

        def end() -> list[Any]:
            running = tasks.running_keys()
            lanes, depths, candidates = tasks.end_candidates(name, role, depth)
            ended: list[Any] = self.scripts["turn_end"](
                keys=[
                    self.keys.turn(name),
                    self.keys.teammate(name),
                    self.keys.inbox(name),
                    self.keys.read_offsets,
                    self.keys.bus,
                    self.keys.bus_seq,
                    self.keys.inbox(LEAD),
                    *tasks.board_keys(),
                    *running,
                    *lanes,
                    *candidates,
                ],
                args=[token, name, reason, notice, mode, error, len(running), len(lanes), *depths],
            )
            return ended

        for _ in range(SNAPSHOT_RETRIES):
            verdict, released = until_current(end)
            if verdict != "more":
                break
            depth *= 4  # the lanes' first tasks were all ones it may not take back: read deeper
        self.store.lead_inbox.keep_bounds()
        if int(released):
            tasks.wake()
        return str(verdict)
