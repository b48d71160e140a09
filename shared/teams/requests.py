"""A persistent team's protocol requests: shutdowns the lead asks for and teammates answer, plans
teammates submit and the lead reviews, and the lead's forced shutdown."""

from __future__ import annotations

from teamctl.shared.bus import LEAD
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import ProtocolType
from teamctl.shared.errors import ConfigError, TeamError
from teamctl.shared.ids import check_request_id
from teamctl.shared.teams.tasks import TeamTasks, until_current
from teamctl.shared.teams.team_base import RequestRefused, TeamBase
from teamctl.shared.teams.teammates import (
    RequestKind,
    RequestStatus,
    TeammateStatus,
    TeamRequest,
    new_request_id,
)


class TeamRequests:
    """The store's protocol part, on the records every part shares (`store`): each open and
    each answer is one script."""

    def __init__(self, store: TeamBase) -> None:
        self.store = store
        self.conn = store.conn
        self.keys = store.keys
        self.scripts = store.scripts

    def request_shutdown(self, name: str, reason: str = "") -> tuple[TeamRequest, bool]:
        """The lead asks `name` to shut down: a pending record, a shutdown_request in its inbox
        and its wake-up, in one script; returns the record and whether a turn was enqueued.
        BudgetSpent once the team's budget is spent: no turn could answer it."""
        self.store.get(name)
        self.store.refuse_past_budget(
            f"no shutdown request was sent to {name} (`teamctl team "
            f"shutdown {name} --force` shuts it down without a turn)"
        )
        request_id = new_request_id()
        content = (
            f"The lead asks you to shut down{': ' + reason if reason else '.'} Answer "
            f"with respond_shutdown(request_id={request_id!r}, approve=true|false)."
        )
        verdict, woke, _ = self.scripts["request_open"](
            keys=[
                self.keys.request(request_id),
                self.keys.requests,
                self.keys.bus,
                self.keys.bus_seq,
                self.keys.inbox(name),
                self.keys.teammate(name),
                self.keys.events,
                self.keys.teammate_requests(name),
            ],
            args=[
                request_id,
                RequestKind.SHUTDOWN,
                LEAD,
                name,
                reason,
                int(self.store.options.shutdown_deadline_s * 1000),
                ProtocolType.SHUTDOWN_REQUEST,
                content,
            ],
        )
        if verdict == "shutdown":
            raise RequestRefused(f"{name} is already shut down")
        if verdict != "ok":
            raise TeamError(f"shutdown request to {name} not opened ({verdict}); try again")
        self.store.lead_inbox.keep_bounds()
        if woke:
            self.store.scheduler.enqueue_turn(self.store.get(name))
        return self.get(request_id), bool(woke)

    def respond_shutdown(self, name: str, request_id: str, approve: bool, reason: str = "") -> str:
        """`name` answers a shutdown request addressed to it; returns the response's message
        id. Refused, changing nothing: an unknown id, another kind or addressee (ConfigError),
        a resolved or expired request (RequestRefused)."""
        check_request_id(request_id)
        content = f"{name} {'approves' if approve else 'rejects'} shutdown request {request_id}" + (
            f": {reason}" if reason else ""
        )
        verdict, detail, _ = self.scripts["request_resolve"](
            keys=self._resolve_keys(request_id, answer_to=LEAD, teammate=name),
            args=[
                request_id,
                RequestKind.SHUTDOWN,
                name,
                "1" if approve else "0",
                reason,
                ProtocolType.SHUTDOWN_RESPONSE,
                content,
                name,
            ],
        )
        _raise_refusal(request_id, verdict, detail, RequestKind.SHUTDOWN, name, name)
        self.store.lead_inbox.keep_bounds()
        return str(detail)

    def submit_plan(self, name: str, plan: str) -> TeamRequest:
        """A teammate in plan mode asks the lead to approve `plan` (one pending at a time):
        RequestRefused when it is not in plan mode, already approved, or has one pending."""
        if not plan.strip():
            raise ConfigError("the plan is empty; say what you will do, step by step")
        teammate = self.store.get(name)
        request_id = new_request_id()
        last = self.keys.request(teammate.plan_request or request_id)
        content = (
            f"{name} asks you to approve a plan ({request_id}); review it with "
            f"`teamctl team review {request_id} --approve|--reject`:\n{plan}"
        )
        verdict, detail = self.scripts["plan_submit"](
            keys=[
                self.keys.request(request_id),
                self.keys.requests,
                self.keys.bus,
                self.keys.bus_seq,
                self.keys.inbox(LEAD),
                self.keys.teammate(name),
                last,
                self.keys.events,
                self.keys.teammate_requests(name),
            ],
            args=[
                request_id,
                name,
                plan,
                int(self.store.options.plan_deadline_s * 1000),
                ProtocolType.PLAN_APPROVAL_REQUEST,
                content,
            ],
        )
        if verdict == "pending":
            raise RequestRefused(
                f"plan request {detail} is still pending; wait for the lead's "
                "plan_approval_response"
            )
        if verdict == "not_required":
            raise RequestRefused(
                f"{name} is not waiting for a plan approval (plan mode "
                f"{detail or 'off'}); go ahead without one"
            )
        self.store.lead_inbox.keep_bounds()
        return self.get(detail)  # a replayed call names the request it first opened

    def review_plan(self, request_id: str, approve: bool, feedback: str = "") -> tuple[str, bool]:
        """The lead approves or rejects a plan request: the record, a plan_approval_response to
        the teammate and its wake-up, in one script; returns the message id and whether a turn
        was enqueued. Refusals as for respond_shutdown (a rejection keeps the gate), and
        BudgetSpent once the team's budget is spent (no turn could act on it)."""
        requester = self.get(request_id).from_
        self.store.refuse_past_budget(f"plan request {request_id} stays pending")
        content = (
            f"The lead {'approves' if approve else 'rejects'} your plan {request_id}"
            + (f": {feedback}" if feedback else "")
            + ("" if approve else ". Revise it and submit_plan again.")
        )
        verdict, detail, woke = self.scripts["request_resolve"](
            keys=self._resolve_keys(request_id, answer_to=requester, teammate=requester),
            args=[
                request_id,
                RequestKind.PLAN_APPROVAL,
                LEAD,
                "1" if approve else "0",
                feedback,
                ProtocolType.PLAN_APPROVAL_RESPONSE,
                content,
                requester,
            ],
        )
        _raise_refusal(request_id, verdict, detail, RequestKind.PLAN_APPROVAL, LEAD, requester)
        self.store.lead_inbox.keep_bounds()
        if woke:
            self.store.scheduler.enqueue_turn(self.store.get(requester))
        return str(detail), bool(woke)

    def _resolve_keys(self, request_id: str, *, answer_to: str, teammate: str) -> list[str]:
        """request_resolve.lua's keys: the request, the bus, the inbox the answer goes to, and
        the teammate whose record and open requests the answer changes."""
        k = self.keys
        return [
            k.request(request_id),
            k.bus,
            k.bus_seq,
            k.inbox(answer_to),
            k.teammate(teammate),
            k.events,
            k.teammate_requests(teammate),
        ]

    def get(self, request_id: str) -> TeamRequest:
        """One request's record, expired first if it is pending past its deadline; ConfigError
        for an unknown id."""
        check_request_id(request_id)
        flat = self.scripts["request_read"](keys=[self.keys.request(request_id), self.keys.events])
        if not flat:
            raise ConfigError(
                f"unknown request {request_id} in team {self.store.team}; "
                "see `teamctl team requests`"
            )
        fields = dict(zip(flat[0::2], flat[1::2], strict=True))
        return TeamRequest.from_hash(self.store.team, fields)

    def all(self, *, pending_only: bool = False) -> list[TeamRequest]:
        """Every request of the team, oldest first (expiry applied as each is read)."""
        records = [self.get(rid) for rid in self.conn.zrange(self.keys.requests, 0, -1)]
        return [r for r in records if r.status is RequestStatus.PENDING or not pending_only]

    def wait(self, request_id: str, timeout_s: float) -> TeamRequest | None:
        """Block until the request is resolved (and, approved, its teammate shut down) or
        `timeout_s` passes (None). Woken by the bus, where every answer and notice lands; an
        unanswered request is read again at its deadline, which expires it."""
        until_ms = now_ms() + int(timeout_s * 1000)
        # The bus position comes before the first read, so no answer slips between the two.
        newest = self.conn.xrevrange(self.keys.bus, count=1)
        last_id = newest[0][0] if newest else "0-0"
        while True:
            record = self.get(request_id)
            if self._settled(record):
                return record
            now = now_ms()
            if now >= until_ms:
                return None
            wake_ms = until_ms
            if record.status is RequestStatus.PENDING:
                wake_ms = min(until_ms, record.deadline_ms + 1)
            for message in self.store.bus.tail(last_id, max(wake_ms - now, 1)):
                last_id = message.id

    def _settled(self, record: TeamRequest) -> bool:
        if record.status is RequestStatus.PENDING:
            return False
        if record.status is RequestStatus.APPROVED and record.kind is RequestKind.SHUTDOWN:
            return self.store.get(record.to).status is TeammateStatus.SHUTDOWN
        return True

    def force_shutdown(self, name: str) -> None:
        """Shut `name` down now: its turn token is revoked (late writes refused), its tasks go
        back to the board (idle teammates woken for them), the lead is told. RequestRefused
        when it is already shut down."""
        self.store.get(name)
        tasks = TeamTasks(self.store)
        verdict, released = until_current(
            lambda: self.scripts["team_shutdown"](
                keys=[
                    self.keys.teammate(name),
                    self.keys.turn(name),
                    self.keys.bus,
                    self.keys.bus_seq,
                    self.keys.inbox(LEAD),
                    *tasks.board_keys(),
                    *tasks.running_keys(),
                ],
                args=[f"{name} shut down (forced by the lead)", name],
            )
        )
        if verdict == "shutdown":
            raise RequestRefused(f"{name} is already shut down")
        self.store.lead_inbox.keep_bounds()
        if int(released):
            tasks.wake()


def _raise_refusal(
    request_id: str, verdict: str, detail: str, kind: RequestKind, responder: str, teammate: str
) -> None:
    """The exception for a refused resolve (nothing was written), or nothing for 'ok'."""
    if verdict == "ok":
        return
    if verdict == "unknown":
        raise ConfigError(f"unknown request {request_id}; see `teamctl team requests`")
    if verdict == "wrong_kind":
        raise ConfigError(f"request {request_id} is a {detail} request, not a {kind} request")
    if verdict == "wrong_responder":
        raise ConfigError(
            f"request {request_id} is addressed to {detail}, not {responder}; "
            "only its addressee answers it"
        )
    if verdict == "stale":
        current = f"its current one is {detail}" if detail else "it has none pending"
        raise RequestRefused(
            f"request {request_id} is not {teammate}'s current {kind} request "
            f"({teammate} was re-spawned since it was made, or {current}); "
            "nothing changed"
        )
    raise RequestRefused(f"request {request_id} is already {detail}")
