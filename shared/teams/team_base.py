"""What every part of a persistent team's store stands on: its connection, keys and scripts, its
options, bus, lead inbox and budget, its roster, and its turn scheduler."""

from __future__ import annotations

from functools import cached_property

import redis
from teamctl.shared.agent.replies import Usage
from teamctl.shared.budget import Budget, Charge, UsageTotals
from teamctl.shared.bus import MessageBus
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import ConfigError, TeamError, unreadable
from teamctl.shared.keys import TeamKeys
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.teams.lead_inbox import LeadInbox
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.scheduler import TurnScheduler
from teamctl.shared.teams.teammates import (
    Teammate,
    TeamMeta,
    check_teammate_name,
)
from teamctl.shared.text import quoted
from teamctl.shared.workspace.caps import WorkspaceStore


class TeammateBusy(TeamError):
    """Refused by a teammate's state (it is working): exit 1, try again later."""


class RequestRefused(TeamError):
    """Refused by a request's or teammate's state (already resolved, shut down): exit 1."""


class BudgetSpent(TeamError):
    """Refused because the team's budget is spent (no turn may start, no model call): exit 1."""


class TeamBase:
    """One team's records in Redis (`conn` decodes responses): what the store's parts share."""

    def __init__(
        self,
        conn: redis.Redis,
        team: str,
        *,
        scripts: Scripts | GuardedScripts | None = None,
        workspace_store: WorkspaceStore = "local",
        options: TeamOptions | None = None,
    ) -> None:
        self.conn = conn
        self.keys = TeamKeys(team)
        self.scripts = scripts or Scripts(conn)
        self.workspace_store: WorkspaceStore = workspace_store
        """Where the workspace of a team this store creates keeps its files (an existing
        team's meta says where its own are)."""
        if options is not None:
            self.options = options  # fills the cached property: the meta is not read again

    @property
    def team(self) -> str:
        return self.keys.team

    def exists(self) -> bool:
        return bool(self.conn.exists(self.keys.meta))

    def meta(self) -> TeamMeta:
        """The team's meta record; ConfigError when there is no such team."""
        raw = self.conn.get(self.keys.meta)
        if raw is None:
            raise ConfigError(
                f"no team {self.team!r}; spawn a teammate to create it "
                "(`teamctl team spawn NAME -t TEAM ...`) or see `teamctl teams`"
            )
        try:
            return TeamMeta.model_validate_json(raw)
        except ValueError as exc:
            raise unreadable(f"the options of team {self.team}", exc) from exc

    @cached_property
    def options(self) -> TeamOptions:
        """The team's options, read from its meta once."""
        return self.meta().options

    @cached_property
    def budget(self) -> Budget:
        return Budget(
            self.conn,
            self.keys,
            max_tokens=self.options.max_tokens,
            max_cost_usd=self.options.max_cost_usd,
            scripts=self.scripts,
        )

    @cached_property
    def bus(self) -> MessageBus:
        return MessageBus(
            self.conn,
            self.keys,
            max_message_bytes=self.options.max_message_bytes,
            bus_maxlen=self.options.bus_max_messages,
            scripts=self.scripts,
        )

    @cached_property
    def scheduler(self) -> TurnScheduler:
        """Where the team's turns are enqueued and its stalled turns rerun."""
        return TurnScheduler(self)

    @cached_property
    def lead_inbox(self) -> LeadInbox:
        """The lead inbox's and the bus's bounds, kept after each step that adds mail."""
        return LeadInbox(self.keys, self.options, self.bus, self.scripts)

    def budget_exceeded(self) -> str | None:
        """Why no model call of the team may start and no teammate may be woken, or None while
        its budget lasts (always None without max_tokens and max_cost_usd: no read)."""
        options = self.options
        if options.max_tokens is None and options.max_cost_usd is None:
            return None
        return self.budget.exceeded()

    def usage(self) -> UsageTotals:
        """The team's totals so far: every teammate's and the lead's model calls."""
        return UsageTotals.model_validate(self.conn.hgetall(self.keys.usage))

    def charge(self, usage: Usage) -> Charge:
        """Add one model call's usage to the team's totals and check its limits, atomically;
        the call that spent the budget tells the lead (one `team.budget_exceeded` notice)."""
        return self.charged(self.budget.charge(usage))

    def charged(self, charge: Charge) -> Charge:
        """After a call was charged (by the settle of its provider slot, or `charge`): the
        call that spent the budget tells the lead (one `team.budget_exceeded` notice)."""
        if charge.crossed and charge.exceeded:
            self.bus.tell_lead(
                SystemType.TEAM_BUDGET_EXCEEDED,
                None,
                f"{charge.exceeded}: no teammate or lead starts another model "
                "call and messages wake no one until "
                f"{self.top_up_command()} raises it",
            )
        return charge

    def refuse_past_budget(self, refused: str) -> None:
        """BudgetSpent, saying what was `refused` (nothing was written), once the team exists
        and its budget is spent."""
        reason = self.budget_exceeded() if self.exists() else None
        if reason:
            raise BudgetSpent(
                f"team {self.team}: {reason}; {refused} (no teammate takes "
                f"another turn until {self.top_up_command()} raises it)"
            )

    def top_up_command(self) -> str:
        """The command that raises this team's budget, with a flag for a limit it has."""
        return f"`teamctl team budget {self.budget.top_up_flag()} -t {self.team}`"

    def plan_state(self, name: str) -> str | None:
        """The teammate's plan_state as stored now (None without plan mode): tools read it
        fresh at each call, since the lead may approve in the middle of a turn."""
        return self.conn.hget(self.keys.teammate(name), "plan_state") or None

    def names(self) -> list[str]:
        """The teammates on the roster, in join order."""
        return list(self.conn.zrange(self.keys.roster, 0, -1))

    def teammates(self) -> list[Teammate]:
        """Every teammate's record, in join order."""
        pipe = self.conn.pipeline(transaction=False)
        names = self.names()
        for name in names:
            pipe.hgetall(self.keys.teammate(name))
        return [Teammate.from_hash(self.team, fields) for fields in pipe.execute() if fields]

    def get(self, name: str) -> Teammate:
        """One teammate's record; ConfigError for a bad name or one not in the team."""
        check_teammate_name(name)
        fields = self.conn.hgetall(self.keys.teammate(name))
        if not fields:
            known = ", ".join(self.names()) or "(none)"
            raise ConfigError(
                f"unknown teammate {quoted(name)} in team {self.team}; teammates: {known}"
            )
        return Teammate.from_hash(self.team, fields)
