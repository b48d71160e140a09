"""A persistent team's store: create, spawn, message, wake, reconcile and delete, plus the turn
writes a worker makes; shared by the CLI and the turn job.

Each state change is made by one Lua script on the team's keys (one slot), so spawns, wake-ups, turn
ends and reconciles serialize (around some, the lead inbox's upkeep runs scripts of its own: a
message to the lead may first fold older notices, then the send itself is one script): a message
published before a turn ends is seen by that turn, one published after it wakes the teammate, and
none is lost between. Turns are RQ jobs enqueued by function name (TURN_FUNCTION), so this module
needs no worker code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.budget import Budget, Charge, UsageTotals
from teamctl.shared.bus import LEAD, MessageBus, envelope_from_lua
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError, TeamError, unreadable
from teamctl.shared.ids import BROADCAST, check_queue, check_request_id
from teamctl.shared.keys import TEAMS_INDEX, TeamKeys
from teamctl.shared.models import Envelope, ProtocolType, SystemType, Usage
from teamctl.shared.redis.connection import block_ms, same_server
from teamctl.shared.redis.scripts import GuardedScripts, Scripts, WriteGuard
from teamctl.shared.teams.lead_inbox import LeadInbox
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import LANE_HEAD, TeamTasks
from teamctl.shared.teams.teammates import (
    TURN_FUNCTION,
    MateStatus,
    RequestKind,
    RequestStatus,
    TeamEvent,
    Teammate,
    TeamMeta,
    TeamRequest,
    check_mate_name,
    check_tools,
    new_request_id,
)
from teamctl.shared.text import quoted

SNAPSHOT_RETRIES = 50
"""Reads of the task keys a script is given before giving up on a board that keeps changing."""
PEEK_BATCH = 1000
TURN_RESULT_TTL_S = 60
"""How long a finished turn's RQ job and result stay (for `rq info`): the teammate's record is
what tells its state, and a team taking thousands of turns an hour must not keep each one."""
PEEK_PAGE = 32
"""Message bodies one team_peek script copies (each up to max_message_bytes)."""
COUNT_PAGE = 1000
"""Inbox ids one round trip counts."""
"""Unread messages shown or injected at once (the rest come with the next model call)."""
DELETE_BATCH = 500


class MateBusy(TeamError):
    """Refused by a teammate's state (it is working): exit 1, try again later."""


class RequestRefused(TeamError):
    """Refused by a request's or teammate's state (already resolved, shut down): exit 1."""


class BudgetSpent(TeamError):
    """Refused because the team's budget is spent (no turn may start, no model call): exit 1."""




class TeamStore:
    """One team's records in Redis (`conn` decodes responses)."""

    def __init__(self, conn: redis.Redis, team: str, *,
                 scripts: Scripts | GuardedScripts | None = None) -> None:
        self.conn = conn
        self.keys = TeamKeys(team)
        self.scripts = scripts or Scripts(conn)

    @property
    def team(self) -> str:
        return self.keys.team

    def guarded(self, name: str, token: str, call_key: str) -> TeamStore:
        """This store with every script call of one tool call of `name`'s turn guarded: refused
        once the token lost the lease, and run once, so a rerun replays it."""
        guard = WriteGuard(turn_key=self.keys.turn(name), effects_key=self.keys.effects(name),
                           token=token, call_key=call_key)
        clone = TeamStore(self.conn, self.team, scripts=self.scripts.guarded(guard))
        clone.__dict__["options"] = self.options  # cached_property: no second read of meta
        return clone

    # --- the team ------------------------------------------------------------------------------

    def create(self, options: TeamOptions | None = None) -> TeamMeta:
        """The team's meta record, written now unless the team exists (then it is kept)."""
        self.create_new(options)
        return self.meta()

    def create_new(self, options: TeamOptions | None = None,
                   mcp_servers: Iterable[McpServer] = ()) -> bool:
        """Write the team's meta record; False (nothing written) if the team exists. ConfigError
        (nothing written) when what the lead may grant is not there (TeamMeta.check_grants)."""
        meta = TeamMeta(options=options or TeamOptions(), mcp_servers=list(mcp_servers),
                        created_ms=now_ms())
        meta.check_grants()
        if not self.conn.set(self.keys.meta, meta.model_dump_json(), nx=True):
            return False
        self.conn.zadd(TEAMS_INDEX, {self.team: meta.created_ms}, nx=True)
        return True

    def exists(self) -> bool:
        return bool(self.conn.exists(self.keys.meta))

    def meta(self) -> TeamMeta:
        """The team's meta record; ConfigError when there is no such team."""
        raw = self.conn.get(self.keys.meta)
        if raw is None:
            raise ConfigError(f"no team {self.team!r}; spawn a teammate to create it "
                              "(`teamctl team spawn NAME -t TEAM ...`) or see `teamctl teams`")
        try:
            return TeamMeta.model_validate_json(raw)
        except ValueError as exc:
            raise unreadable(f"the options of team {self.team}", exc) from exc

    @cached_property
    def options(self) -> TeamOptions:
        return self.meta().options

    @cached_property
    def budget(self) -> Budget:
        return Budget(self.conn, self.keys, max_tokens=self.options.max_tokens,
                      max_cost_usd=self.options.max_cost_usd, scripts=self.scripts)

    @cached_property
    def bus(self) -> MessageBus:
        return MessageBus(self.conn, self.keys, max_message_bytes=self.options.max_message_bytes,
                          bus_maxlen=self.options.bus_max_messages, scripts=self.scripts)

    @cached_property
    def lead_inbox(self) -> LeadInbox:
        """The lead inbox's and the bus's bounds, kept after each step that adds mail."""
        return LeadInbox(self.keys, self.options, self.bus, self.scripts)

    # --- the budget ----------------------------------------------------------------------------

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
        charge = self.budget.charge(usage)
        if charge.crossed and charge.exceeded:
            self.bus.publish("system", LEAD, SystemType.TEAM_BUDGET_EXCEEDED, None,
                             f"{charge.exceeded}: no teammate or lead starts another model "
                             "call and messages wake no one (`teamctl teams` shows the "
                             "team's usage)")
        return charge

    def refuse_past_budget(self, refused: str) -> None:
        """BudgetSpent, saying what was `refused` (nothing was written), once the team exists
        and its budget is spent."""
        reason = self.budget_exceeded() if self.exists() else None
        if reason:
            raise BudgetSpent(f"team {self.team}: {reason}; {refused} (no teammate takes "
                              "another turn; `teamctl teams` shows the usage)")

    def delete(self, *, force: bool = False) -> int:
        """Remove every key of the team and its index entry; returns keys removed. Refused
        (MateBusy) while a teammate works, unless `force` (its turn's writes are then refused)."""
        self.meta()
        working = [m.name for m in self.mates() if m.status is MateStatus.WORKING]
        if working and not force:
            raise MateBusy(f"{', '.join(working)} of team {self.team} "
                           f"{'is' if len(working) == 1 else 'are'} working; wait for idle or "
                           "use --force")
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

    # --- teammates -----------------------------------------------------------------------------

    def spawn(self, name: str, *, role: str, prompt: str, model: str, api_base: str | None,
              queue: str, plan_mode: bool = False, tools: Iterable[str] = (),
              mcp: Iterable[str] = (), workspace: Path | None = None) -> Teammate:
        """(Re)start a teammate and enqueue its first turn; MateBusy while it is working. In
        plan mode it must have a plan approved (submit_plan, review_plan) before gated tools.
        `tools` are workspace tools and Python tools (ConfigError for others) working in
        `workspace` (team_workspace; None: the worker's own state dir); `mcp` names servers
        of the team's `mcp_servers`, or tools of them (ConfigError otherwise)."""
        check_mate_name(name)
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
        args = [name, role, prompt, model, api_base or "", queue, self.options.max_teammates,
                first, "required" if plan_mode else "", ",".join(chosen), str(workspace or ""),
                ",".join(entries)]
        verdict = self._spawn_current(name, args)
        if verdict == "working":
            raise MateBusy(f"{name} is working; wait for idle or shut it down")
        if verdict == "full":
            raise ConfigError(f"team {self.team} has {self.options.max_teammates} teammates, "
                              "its limit (max_teammates); delete the team or use another")
        mate = self.get(name)
        self.enqueue_turn(mate)
        return mate

    def _spawn_current(self, name: str, args: list[Any]) -> str:
        """Run team_spawn with the teammate's requests as they stand (its re-spawn expires the
        pending ones), again while it answers 'retry' (a request opened in between)."""
        for _ in range(SNAPSHOT_RETRIES):
            ids = sorted(self.conn.smembers(self.keys.mate_requests(name)))
            verdict = self.scripts["team_spawn"](
                keys=[self.keys.mate(name), self.keys.memory(name), self.keys.roster,
                      self.keys.roster_ver, self.keys.events, self.keys.mate_requests(name),
                      *(self.keys.request(request_id) for request_id in ids)],
                args=[*args, *ids])
            if verdict != "retry":
                return str(verdict)
        raise TeamError(f"{name}'s requests kept changing under this spawn; try again")

    def plan_state(self, name: str) -> str | None:
        """The teammate's plan_state as stored now (None without plan mode): tools read it
        fresh at each call, since the lead may approve in the middle of a turn."""
        return self.conn.hget(self.keys.mate(name), "plan_state") or None

    def names(self) -> list[str]:
        """The teammates on the roster, in join order."""
        return list(self.conn.zrange(self.keys.roster, 0, -1))

    def mates(self) -> list[Teammate]:
        """Every teammate's record, in join order."""
        pipe = self.conn.pipeline(transaction=False)
        names = self.names()
        for name in names:
            pipe.hgetall(self.keys.mate(name))
        return [Teammate.from_hash(self.team, fields) for fields in pipe.execute() if fields]

    def get(self, name: str) -> Teammate:
        """One teammate's record; ConfigError for a bad name or one not in the team."""
        check_mate_name(name)
        fields = self.conn.hgetall(self.keys.mate(name))
        if not fields:
            known = ", ".join(self.names()) or "(none)"
            raise ConfigError(f"unknown teammate {quoted(name)} in team {self.team}; "
                              f"teammates: {known}")
        return Teammate.from_hash(self.team, fields)

    # --- messages ------------------------------------------------------------------------------

    def send(self, sender: str, to: str, content: str,
             type_: str | None = None) -> tuple[Envelope, bool]:
        """A message from `sender` (a teammate or `lead`) to a teammate or `lead`, published and
        its recipient woken; returns the message and whether a turn was enqueued. A protocol
        type is refused (ConfigError listing the valid types): only its tools send it."""
        if to != LEAD:
            self.get(to)  # an unknown teammate is a ConfigError naming the team's teammates
        elif sender != LEAD:
            self.lead_inbox.make_room(sender)  # LeadMailboxFull: a tool error for the sender
        message = self.bus.send(sender, to, type_, None, content)
        assert message is not None  # a team bus is always on
        self.lead_inbox.keep_bounds()
        return message, (to != LEAD and self.wake(to))

    def broadcast(self, sender: str, content: str) -> tuple[Envelope, list[str]]:
        """A message to every teammate but the sender (and to the lead, from a teammate);
        returns it and the teammates it woke."""
        if sender != LEAD:
            self.lead_inbox.make_room(sender)
        message = self.bus.send(sender, BROADCAST, None, None, content)
        assert message is not None
        self.lead_inbox.keep_bounds()
        if self.budget_exceeded():  # asked once, not once per teammate
            return message, []
        return message, [name for name in self.names()
                         if name != sender and self._wake_within_budget(name)]

    def wake(self, name: str) -> bool:
        """Flip an idle teammate to working and enqueue its turn; False when it needs none, or
        the team's budget is spent (the mail waits unread)."""
        return not self.budget_exceeded() and self._wake_within_budget(name)

    def _wake_within_budget(self, name: str) -> bool:
        """wake() once the caller knows the budget lasts."""
        queue = self.scripts["team_wake"](keys=[self.keys.mate(name), self.keys.events],
                                          args=[name])
        if not queue:
            return False
        self._enqueue(name, str(queue))  # the script named the queue: no read of the record
        return True

    def peek(self, member: str, limit: int = PEEK_BATCH, *,
             seen: bool = False) -> tuple[str, list[Envelope]]:
        """The member's first `limit` unread messages, left unread; with the last inbox id they
        cover. Read PEEK_PAGE at a time (a script copies at most that many bodies). `seen`:
        they go to a model, so the lead's are never folded from now on."""
        if member != LEAD:
            self.get(member)
        record = [self.keys.lead_inbox] if seen and member == LEAD else []
        last_id, messages = "", []
        while limit > 0:
            page = min(limit, PEEK_PAGE)
            page_last, entries = self.scripts["team_peek"](
                keys=[self.keys.inbox(member), self.keys.read_offsets, self.keys.bus, *record],
                args=[member, page, last_id])
            if not page_last:
                break
            last_id = page_last
            messages += [envelope_from_lua(entry) for entry in entries]
            limit -= page
        return last_id, messages

    def unread_count(self, member: str) -> int:
        """How many messages wait unread in the member's inbox (ids only: no body is read)."""
        after = self.conn.hget(self.keys.read_offsets, member) or "0-0"
        count = 0
        while True:
            ids = self.conn.xrange(self.keys.inbox(member), f"({after}", "+", count=COUNT_PAGE)
            count += len(ids)
            if len(ids) < COUNT_PAGE:
                return count
            after = ids[-1][0]

    def kept(self, member: str) -> list[Envelope]:
        """Every message still in the member's inbox, read or not, in order (for export)."""
        if member != LEAD:
            self.get(member)
        ids = {entry_id for entry_id, _ in self.conn.xrange(self.keys.inbox(member))}
        return [m for m in self.bus.messages() if m.id in ids]

    def events(self, after_id: str = "0-0", *, wait_ms: int | None = None,
               count: int = PEEK_BATCH) -> list[TeamEvent]:
        """Task, teammate and request changes after `after_id`, in order; waits up to `wait_ms`
        for the first (None: do not wait), so watchers block instead of polling."""
        streams = {self.keys.events: after_id}
        reply = (self.conn.xread(streams, count=count) if wait_ms is None else
                 self.bus.blocking_conn.xread(streams, count=count, block=block_ms(wait_ms)))
        entries = reply[0][1] if reply else []
        return [TeamEvent.model_validate({"id": entry_id, **fields})
                for entry_id, fields in entries]

    def notices(self, type_: SystemType) -> list[Envelope]:
        """Every message of that system type still on the bus (tests and the lead's views)."""
        return [m for m in self.bus.messages() if m.type == type_]

    # --- protocol requests ----------------------------------------------------------------------

    def request_shutdown(self, name: str, reason: str = "") -> tuple[TeamRequest, bool]:
        """The lead asks `name` to shut down: a pending record, a shutdown_request in its inbox
        and its wake-up, in one script; returns the record and whether a turn was enqueued.
        BudgetSpent once the team's budget is spent: no turn could answer it."""
        self.get(name)
        self.refuse_past_budget(f"no shutdown request was sent to {name} (`teamctl team "
                                f"shutdown {name} --force` shuts it down without a turn)")
        request_id = new_request_id()
        content = (f"The lead asks you to shut down{': ' + reason if reason else '.'} Answer "
                   f"with respond_shutdown(request_id={request_id!r}, approve=true|false).")
        verdict, woke, _ = self.scripts["request_open"](
            keys=[self.keys.request(request_id), self.keys.requests, self.keys.bus,
                  self.keys.bus_seq, self.keys.inbox(name), self.keys.mate(name),
                  self.keys.events, self.keys.mate_requests(name)],
            args=[request_id, RequestKind.SHUTDOWN, LEAD, name, reason,
                  int(self.options.shutdown_deadline_s * 1000), ProtocolType.SHUTDOWN_REQUEST,
                  content])
        if verdict == "shutdown":
            raise RequestRefused(f"{name} is already shut down")
        if verdict != "ok":
            raise TeamError(f"shutdown request to {name} not opened ({verdict}); try again")
        self.lead_inbox.keep_bounds()
        if woke:
            self.enqueue_turn(self.get(name))
        return self.request(request_id), bool(woke)

    def respond_shutdown(self, name: str, request_id: str, approve: bool,
                         reason: str = "") -> str:
        """`name` answers a shutdown request addressed to it; returns the response's message
        id. Refused, changing nothing: an unknown id, another kind or addressee (ConfigError),
        a resolved or expired request (RequestRefused)."""
        check_request_id(request_id)
        content = (f"{name} {'approves' if approve else 'rejects'} shutdown request "
                   f"{request_id}" + (f": {reason}" if reason else ""))
        verdict, detail, _ = self.scripts["request_resolve"](
            keys=[self.keys.request(request_id), self.keys.bus, self.keys.bus_seq,
                  self.keys.inbox(LEAD), self.keys.mate(name), self.keys.events,
                  self.keys.mate_requests(name)],
            args=[request_id, RequestKind.SHUTDOWN, name, "1" if approve else "0", reason,
                  ProtocolType.SHUTDOWN_RESPONSE, content, name])
        _raise_refusal(request_id, verdict, detail, RequestKind.SHUTDOWN, name, name)
        self.lead_inbox.keep_bounds()
        return str(detail)

    def submit_plan(self, name: str, plan: str) -> TeamRequest:
        """A teammate in plan mode asks the lead to approve `plan` (one pending at a time):
        RequestRefused when it is not in plan mode, already approved, or has one pending."""
        if not plan.strip():
            raise ConfigError("the plan is empty; say what you will do, step by step")
        mate = self.get(name)
        request_id = new_request_id()
        last = self.keys.request(mate.plan_request or request_id)
        content = (f"{name} asks you to approve a plan ({request_id}); review it with "
                   f"`teamctl team review {request_id} --approve|--reject`:\n{plan}")
        verdict, detail = self.scripts["plan_submit"](
            keys=[self.keys.request(request_id), self.keys.requests, self.keys.bus,
                  self.keys.bus_seq, self.keys.inbox(LEAD), self.keys.mate(name), last,
                  self.keys.events, self.keys.mate_requests(name)],
            args=[request_id, name, plan, int(self.options.plan_deadline_s * 1000),
                  ProtocolType.PLAN_APPROVAL_REQUEST, content])
        if verdict == "pending":
            raise RequestRefused(f"plan request {detail} is still pending; wait for the lead's "
                                 "plan_approval_response")
        if verdict == "not_required":
            raise RequestRefused(f"{name} is not waiting for a plan approval (plan mode "
                                 f"{detail or 'off'}); go ahead without one")
        self.lead_inbox.keep_bounds()
        return self.request(detail)  # a replayed call names the request it first opened

    def review_plan(self, request_id: str, approve: bool,
                    feedback: str = "") -> tuple[str, bool]:
        """The lead approves or rejects a plan request: the record, a plan_approval_response to
        the teammate and its wake-up, in one script; returns the message id and whether a turn
        was enqueued. Refusals as for respond_shutdown (a rejection keeps the gate), and
        BudgetSpent once the team's budget is spent (no turn could act on it)."""
        requester = self.request(request_id).from_
        self.refuse_past_budget(f"plan request {request_id} stays pending")
        content = (f"The lead {'approves' if approve else 'rejects'} your plan {request_id}"
                   + (f": {feedback}" if feedback else "")
                   + ("" if approve else ". Revise it and submit_plan again."))
        verdict, detail, woke = self.scripts["request_resolve"](
            keys=[self.keys.request(request_id), self.keys.bus, self.keys.bus_seq,
                  self.keys.inbox(requester), self.keys.mate(requester), self.keys.events,
                  self.keys.mate_requests(requester)],
            args=[request_id, RequestKind.PLAN_APPROVAL, LEAD, "1" if approve else "0",
                  feedback, ProtocolType.PLAN_APPROVAL_RESPONSE, content, requester])
        _raise_refusal(request_id, verdict, detail, RequestKind.PLAN_APPROVAL, LEAD, requester)
        self.lead_inbox.keep_bounds()
        if woke:
            self.enqueue_turn(self.get(requester))
        return str(detail), bool(woke)

    def request(self, request_id: str) -> TeamRequest:
        """One request's record, expired first if it is pending past its deadline; ConfigError
        for an unknown id."""
        check_request_id(request_id)
        flat = self.scripts["request_read"](keys=[self.keys.request(request_id),
                                                  self.keys.events])
        if not flat:
            raise ConfigError(f"unknown request {request_id} in team {self.team}; "
                              "see `teamctl team requests`")
        return TeamRequest.from_hash(self.team, dict(zip(flat[0::2], flat[1::2], strict=True)))

    def requests(self, *, pending_only: bool = False) -> list[TeamRequest]:
        """Every request of the team, oldest first (expiry applied as each is read)."""
        records = [self.request(rid) for rid in self.conn.zrange(self.keys.requests, 0, -1)]
        return [r for r in records if r.status is RequestStatus.PENDING or not pending_only]

    def wait_request(self, request_id: str, timeout_s: float) -> TeamRequest | None:
        """Block until the request is resolved (and, approved, its teammate shut down) or
        `timeout_s` passes (None). Woken by the bus, where every answer and notice lands; an
        unanswered request is read again at its deadline, which expires it."""
        until_ms = now_ms() + int(timeout_s * 1000)
        # The bus position comes before the first read, so no answer slips between the two.
        newest = self.conn.xrevrange(self.keys.bus, count=1)
        last_id = newest[0][0] if newest else "0-0"
        while True:
            record = self.request(request_id)
            if self._settled(record):
                return record
            now = now_ms()
            if now >= until_ms:
                return None
            wake_ms = until_ms
            if record.status is RequestStatus.PENDING:
                wake_ms = min(until_ms, record.deadline_ms + 1)
            for message in self.bus.tail(last_id, max(wake_ms - now, 1)):
                last_id = message.id

    def _settled(self, record: TeamRequest) -> bool:
        if record.status is RequestStatus.PENDING:
            return False
        if record.status is RequestStatus.APPROVED and record.kind is RequestKind.SHUTDOWN:
            return self.get(record.to).status is MateStatus.SHUTDOWN
        return True

    def force_shutdown(self, name: str) -> None:
        """Shut `name` down now: its turn token is revoked (late writes refused), its tasks go
        back to the board (idle teammates woken for them), the lead is told. RequestRefused
        when it is already shut down."""
        self.get(name)
        tasks = TeamTasks(self)
        verdict, released = self._until_current(lambda: self.scripts["team_shutdown"](
            keys=[self.keys.mate(name), self.keys.turn(name), self.keys.bus, self.keys.bus_seq,
                  self.keys.inbox(LEAD), *tasks.board_keys(), *tasks.running_keys()],
            args=[f"{name} shut down (forced by the lead)", name]))
        if verdict == "shutdown":
            raise RequestRefused(f"{name} is already shut down")
        self.lead_inbox.keep_bounds()
        if int(released):
            tasks.wake()

    # --- turns ---------------------------------------------------------------------------------

    @cached_property
    def _rq_conn(self) -> redis.Redis:
        """RQ needs a client that does not decode responses."""
        return same_server(self.conn, decode=False)

    def enqueue_turn(self, mate: Teammate) -> None:
        """One turn job on the teammate's queue, carrying only ids; its id goes on the mate
        hash, so reconcile can tell a turn still waiting for a worker from a lost one."""
        self._enqueue(mate.name, mate.queue)

    def _enqueue(self, name: str, queue: str) -> None:
        from rq import Queue  # here: RQ is slow to import, and most team verbs wake nobody

        job = Queue(queue, connection=self._rq_conn).enqueue(
            TURN_FUNCTION, self.team, name, job_timeout=self.options.job_timeout_s,
            description=f"turn of {name} in team {self.team}",
            result_ttl=TURN_RESULT_TTL_S, failure_ttl=24 * 3600)
        self.conn.hset(self.keys.mate(name), "job_id", job.id)

    def _working(self, names: list[str]) -> dict[str, str]:
        """The working teammates among `names`, with their turn job's id ('' for none)."""
        pipe = self.conn.pipeline(transaction=False)
        for name in names:
            pipe.hmget(self.keys.mate(name), "status", "job_id")
        return {name: job_id or "" for name, (status, job_id)
                in zip(names, pipe.execute(), strict=True) if status == MateStatus.WORKING}

    def _queued_turns(self, working: dict[str, str]) -> set[str]:
        """The working teammates whose turn job still waits in its queue (not started, so no
        lease yet, however long it waits for a free worker)."""
        jobs = {name: job_id for name, job_id in working.items() if job_id}
        if not jobs:
            return set()
        from rq.job import Job, JobStatus

        fetched = Job.fetch_many(list(jobs.values()), connection=self._rq_conn)
        waiting = {JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED}
        return {name for name, job in zip(jobs, fetched, strict=True)
                if job is not None and job.get_status(refresh=False) in waiting}

    @staticmethod
    def _until_current(run: Callable[[], list[Any]]) -> list[Any]:
        """Run a script that checks the task snapshot its keys were read from, again while it
        answers 'retry' (a claim or completion landed between the read and the script)."""
        for _ in range(SNAPSHOT_RETRIES):
            reply = run()
            if reply[0] != "retry":
                return reply
        raise TeamError("the team's tasks kept changing under this step; try again")

    def workers_on(self, queue: str) -> int:
        """How many RQ workers listen on `queue` (RQ's registry): 0 means turns there wait."""
        from rq import Queue, Worker

        return Worker.count(queue=Queue(check_queue(queue), connection=self._rq_conn))

    def reconcile(self) -> list[str]:
        """Rerun every stalled teammate's turn (working, no lease, unseen for a lease TTL), up to
        max_turn_attempts; past it the teammate goes idle, its tasks go back to the board and
        the lead is told. Returns the teammates whose turn was enqueued again."""
        names = self.names()
        if not names or not self.exists():
            return []
        # Only working teammates can be stalled: an idle team of a thousand costs the script
        # nothing. One that starts working after this read is fresh, not stalled.
        working = self._working(names)
        queued = self._queued_turns(working)
        names = [name for name in working if name not in queued]
        if not names:
            return []
        pairs = [key for name in names for key in (self.keys.mate(name), self.keys.turn(name))]
        options = self.options
        tasks = TeamTasks(self)
        _, rerun, released = self._until_current(lambda: self.scripts["team_reconcile"](
            keys=[self.keys.bus, self.keys.bus_seq, self.keys.inbox(LEAD), *pairs,
                  *tasks.board_keys(), *tasks.running_keys()],
            args=[int(options.heartbeat_ttl_s * 1000), options.max_turn_attempts, *names]))
        self.lead_inbox.keep_bounds()
        if int(released):
            tasks.wake()
        for name in rerun:
            self.enqueue_turn(self.get(name))
        return list(rerun)

    def begin_turn(self, name: str, worker: str) -> tuple[str, str]:
        """('ok', token) with the turn lease taken; ('busy'|'skip', '') otherwise."""
        verdict, token = self.scripts["turn_begin"](
            keys=[self.keys.mate(name), self.keys.turn(name), self.keys.tokens],
            args=[int(self.options.heartbeat_ttl_s * 1000), worker])
        return verdict, token

    def refresh_turn(self, name: str, token: str) -> bool:
        """Extend the turn lease; False once the token no longer holds it."""
        return bool(self.scripts["turn_heartbeat"](
            keys=[self.keys.turn(name), self.keys.mate(name)],
            args=[token, int(self.options.heartbeat_ttl_s * 1000)]))

    def hand_over(self, name: str, token: str) -> bool:
        """Give a working teammate's next turn to a fresh job (this one ran long); False for a
        revoked turn (nothing changes)."""
        if not self.scripts["turn_handover"](
                keys=[self.keys.turn(name), self.keys.mate(name), self.keys.events],
                args=[token, name]):
            return False
        self.enqueue_turn(self.get(name))
        return True

    def memory(self, name: str) -> list[dict[str, Any]]:
        """The teammate's chat messages, oldest first."""
        return [json.loads(raw) for raw in self.conn.lrange(self.keys.memory(name), 0, -1)]

    def checkpoint(self, name: str, token: str, offset_id: str,
                   messages: Sequence[dict[str, Any]]) -> bool:
        """Commit a step (see `commit_step`); False (nothing written) for a revoked turn."""
        return self.commit_step(name, token, offset_id, messages) is not None

    def commit_step(self, name: str, token: str, offset_id: str,
                    messages: Sequence[dict[str, Any]]) -> int | None:
        """Commit a step: its messages to memory (capped at memory_max_messages and
        memory_max_chars, oldest whole exchanges first) and the inbox offset to `offset_id` (''
        keeps it), in one token-checked call. Returns how many of memory's oldest messages the
        caps dropped, so a turn drops them from the conversation it holds too; None (nothing
        written) for a revoked turn."""
        dropped = int(self.scripts["turn_checkpoint"](
            keys=[self.keys.turn(name), self.keys.memory(name), self.keys.read_offsets,
                  self.keys.mate(name), self.keys.effects(name)],
            args=[token, name, offset_id, self.options.memory_max_messages,
                  self.options.memory_max_chars,
                  *(json.dumps(m, ensure_ascii=False) for m in messages)]))
        return None if dropped < 0 else dropped

    def end_turn(self, name: str, token: str, reason: str, notice: str, *,
                 force: bool = False, error: str = "", budget: bool = False) -> str:
        """'continue' (mail arrived, a task reminder, or a task claimed for it: go on), 'idle'
        (ended, lead told), 'shutdown' or 'stale'. `force` ends a failed turn; `budget` one the
        team's spent budget stopped (its tasks go back uncounted against their releases).
        Tasks the end released go to idle teammates."""
        mode = "budget" if budget else "1" if force else "0"
        tasks = TeamTasks(self)
        tasks.index_lanes()
        role = self.conn.hget(self.keys.mate(name), "role")
        depth = LANE_HEAD

        def end() -> list[Any]:
            running = tasks.running_keys()
            lanes, depths, candidates = tasks.end_candidates(name, role, depth)
            ended: list[Any] = self.scripts["turn_end"](
                keys=[self.keys.turn(name), self.keys.mate(name), self.keys.inbox(name),
                      self.keys.read_offsets, self.keys.bus, self.keys.bus_seq,
                      self.keys.inbox(LEAD), *tasks.board_keys(), *running, *lanes,
                      *candidates],
                args=[token, name, reason, notice, mode, error, len(running), len(lanes),
                      *depths])
            return ended

        for _ in range(SNAPSHOT_RETRIES):
            verdict, released = self._until_current(end)
            if verdict != "more":
                break
            depth *= 4  # the lanes' first tasks were all ones it may not take back: read deeper
        self.lead_inbox.keep_bounds()
        if int(released):
            tasks.wake()
        return str(verdict)


def _raise_refusal(request_id: str, verdict: str, detail: str, kind: RequestKind,
                   responder: str, mate: str) -> None:
    """The exception for a refused resolve (nothing was written), or nothing for 'ok'."""
    if verdict == "ok":
        return
    if verdict == "unknown":
        raise ConfigError(f"unknown request {request_id}; see `teamctl team requests`")
    if verdict == "wrong_kind":
        raise ConfigError(f"request {request_id} is a {detail} request, not a {kind} request")
    if verdict == "wrong_responder":
        raise ConfigError(f"request {request_id} is addressed to {detail}, not {responder}; "
                          "only its addressee answers it")
    if verdict == "stale":
        current = f"its current one is {detail}" if detail else "it has none pending"
        raise RequestRefused(f"request {request_id} is not {mate}'s current {kind} request "
                             f"({mate} was re-spawned since it was made, or {current}); "
                             "nothing changed")
    raise RequestRefused(f"request {request_id} is already {detail}")


def list_teams(conn: redis.Redis) -> list[tuple[str, int]]:
    """Every team name with its creation time (ms), oldest first."""
    return [(name, int(score)) for name, score in conn.zrange(TEAMS_INDEX, 0, -1,
                                                              withscores=True)]
