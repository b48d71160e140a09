"""A persistent team's store: create, spawn and delete, plus its parts (messages, protocol requests,
turns) and its turn scheduler; shared by the CLI, the lead and the turn job.

Each state change is made by Lua scripts on the team's keys (one slot), so spawns, wake-ups, turn
ends and reconciles serialize: a message published before a turn ends is seen by that turn, one
published after it wakes the teammate, and none is lost between. A message to the lead may first
fold older notices (the lead inbox's upkeep, scripts of its own), then the send itself is one
script.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.budget import BudgetState
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import ConfigError, TeamError
from teamctl.shared.ids import check_queue
from teamctl.shared.keys import TEAMS_INDEX
from teamctl.shared.process.hosts import this_host
from teamctl.shared.redis.scripts import WriteGuard
from teamctl.shared.teams.forks import TeamForks
from teamctl.shared.teams.messages import TeamMessages
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.requests import TeamRequests
from teamctl.shared.teams.tasks import SNAPSHOT_RETRIES, TeamTasks
from teamctl.shared.teams.team_base import TeamBase, TeammateBusy
from teamctl.shared.teams.teammates import (
    Teammate,
    TeammateStatus,
    TeamMeta,
    check_teammate_name,
    check_tools,
    checked_teammate_fallbacks,
)
from teamctl.shared.teams.turns import TeamTurns

DELETE_BATCH = 500


class TeamStore(TeamBase):
    """One team's records in Redis, as the CLI, the lead and a turn use them: the records every
    part shares, the parts (messages, protocol requests, turns), and the team's own lifecycle."""

    @cached_property
    def messages(self) -> TeamMessages:
        """Sends and broadcasts that wake their recipients, inbox reads and the event stream."""
        return TeamMessages(self)

    @cached_property
    def requests(self) -> TeamRequests:
        """Shutdown and plan requests: opened, answered, read and waited on."""
        return TeamRequests(self)

    @cached_property
    def turns(self) -> TeamTurns:
        """A turn's lease, memory, checkpoints and end, written by the worker that runs it."""
        return TeamTurns(self)

    @cached_property
    def forks(self) -> TeamForks:
        """New teammates from another's memory after one of its turns (`team fork`)."""
        return TeamForks(self)

    def guarded(self, name: str, token: str, call_key: str) -> TeamStore:
        """This store with every script call of one tool call of `name`'s turn guarded: refused
        once the token lost the lease, and run once, so a rerun replays it."""
        guard = WriteGuard(
            turn_key=self.keys.turn(name),
            effects_key=self.keys.effects(name),
            token=token,
            call_key=call_key,
        )
        return TeamStore(
            self.conn, self.team, scripts=self.scripts.guarded(guard), options=self.options
        )

    def create(self, options: TeamOptions | None = None) -> TeamMeta:
        """The team's meta record, written now unless the team exists (then it is kept)."""
        self.create_new(options)
        return self.meta()

    def create_new(
        self, options: TeamOptions | None = None, mcp_servers: Iterable[McpServer] = ()
    ) -> bool:
        """Write the team's meta record; False (nothing written) if the team exists. ConfigError
        (nothing written) when what the lead may grant is not there (TeamMeta.check_grants)."""
        local = self.workspace_store == "local"
        meta = TeamMeta(
            options=options or TeamOptions(),
            mcp_servers=list(mcp_servers),
            created_ms=now_ms(),
            workspace_store=self.workspace_store,
            workspace_host=this_host() if local else None,
        )
        meta.check_grants()
        if not self.conn.set(self.keys.meta, meta.model_dump_json(), nx=True):
            return False
        self.conn.zadd(TEAMS_INDEX, {self.team: meta.created_ms}, nx=True)
        return True

    def raise_budget(self, tokens: int, usd: float) -> tuple[BudgetState, list[str]]:
        """Add to the team's budget (ConfigError for a limit it does not have) and, once it
        lasts again, wake the teammates its spent budget left idle: each with unread mail,
        and those ready tasks go to. The budget after, and who was woken."""
        options = self.meta().options
        if tokens and options.max_tokens is None:
            raise ConfigError(
                f"team {self.team} has no max_tokens: its tokens are not "
                "limited, so there is nothing to add to (--add-usd raises "
                "max_cost_usd)"
            )
        if usd and options.max_cost_usd is None:
            raise ConfigError(
                f"team {self.team} has no max_cost_usd: its cost is not limited, "
                "so there is nothing to add to (--add-tokens raises max_tokens)"
            )
        state = self.budget.top_up(tokens, usd)
        if state.exceeded:
            return state, []
        self.bus.tell_lead(
            SystemType.TEAM_BUDGET_ADDED,
            None,
            "the team's budget was raised: teammates take turns again",
        )
        woken = TeamTasks(self).wake()
        woken += [
            name
            for name in self.names()
            if name not in woken
            and self.messages.peek(name, limit=1)[1]
            and self.messages.wake(name)
        ]
        return state, woken

    def delete(self, *, force: bool = False) -> int:
        """Remove every key of the team and its index entry; returns keys removed. Refused
        (TeammateBusy) while a teammate works, unless `force` (its turn's writes are then
        refused)."""
        self.meta()
        working = [m.name for m in self.teammates() if m.status is TeammateStatus.WORKING]
        if working and not force:
            raise TeammateBusy(
                f"{', '.join(working)} of team {self.team} "
                f"{'is' if len(working) == 1 else 'are'} working; wait for idle or "
                "use --force"
            )
        removed = 0
        batch: list[str] = []
        for key in self.conn.scan_iter(match=self.keys.all_patterns(), count=DELETE_BATCH):
            batch.append(key)
            if len(batch) >= DELETE_BATCH:
                removed += self.conn.delete(*batch)
                batch.clear()
        if batch:
            removed += self.conn.delete(*batch)
        self.conn.zrem(TEAMS_INDEX, self.team)
        return removed

    def spawn(
        self,
        name: str,
        *,
        role: str,
        prompt: str,
        model: str,
        api_base: str | None,
        queue: str,
        plan_mode: bool = False,
        tools: Iterable[str] = (),
        mcp: Iterable[str] = (),
        workspace: Path | None = None,
        fallbacks: Iterable[str] = (),
    ) -> Teammate:
        """(Re)start a teammate and enqueue its first turn; TeammateBusy while it is working. In
        plan mode it must have a plan approved (submit_plan, review_plan) before gated tools.
        `tools` are workspace tools and Python tools (ConfigError for others) working in
        `workspace` (team_workspace; None: the worker's own state dir); `mcp` names servers
        of the team's `mcp_servers`, or tools of them (ConfigError otherwise); `fallbacks` are
        the models its calls try when its own cannot answer (checked model strings)."""
        check_teammate_name(name)
        check_queue(queue)
        chosen = check_tools(tools)
        if not prompt.strip():
            raise ConfigError("the prompt is empty; say what the teammate should do")
        entries = list(dict.fromkeys(mcp))
        self.refuse_past_budget(f"{name} was not spawned")
        if entries:  # checked before create(): a refused spawn leaves no team behind
            (self.meta() if self.exists() else TeamMeta()).mcp_servers_for(entries)
        self.create()
        first = json.dumps({"role": "user", "content": prompt}, ensure_ascii=False)
        args = [
            name,
            role,
            prompt,
            model,
            api_base or "",
            queue,
            self.options.max_teammates,
            first,
            "required" if plan_mode else "",
            ",".join(chosen),
            str(workspace or ""),
            ",".join(entries),
            ",".join(checked_teammate_fallbacks(fallbacks)),
        ]
        verdict = self._spawn_current(name, args)
        if verdict == "working":
            raise TeammateBusy(f"{name} is working; wait for idle or shut it down")
        if verdict == "full":
            raise ConfigError(
                f"team {self.team} has {self.options.max_teammates} teammates, "
                "its limit (max_teammates); delete the team or use another"
            )
        teammate = self.get(name)
        self.scheduler.enqueue_turn(teammate)
        return teammate

    def _spawn_current(self, name: str, args: list[Any]) -> str:
        """Run team_spawn with the teammate's requests as they stand (its re-spawn expires the
        pending ones), again while it answers 'retry' (a request opened in between)."""
        for _ in range(SNAPSHOT_RETRIES):
            ids = sorted(self.conn.smembers(self.keys.teammate_requests(name)))
            verdict = self.scripts["team_spawn"](
                keys=[
                    self.keys.teammate(name),
                    self.keys.memory(name),
                    self.keys.roster,
                    self.keys.roster_ver,
                    self.keys.events,
                    self.keys.teammate_requests(name),
                    *(self.keys.request(request_id) for request_id in ids),
                ],
                args=[*args, *ids],
            )
            if verdict != "retry":
                return str(verdict)
        raise TeamError(f"{name}'s requests kept changing under this spawn; try again")


def list_teams(conn: redis.Redis) -> list[tuple[str, int]]:
    """Every team name with its creation time (ms), oldest first."""
    return [(name, int(score)) for name, score in conn.zrange(TEAMS_INDEX, 0, -1, withscores=True)]
