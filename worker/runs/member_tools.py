"""The eight team tools (AI4J names, parameters and result shapes), made distributed.

What the task tools mean when any worker can run any member:
- team_claim_task: claim a READY task for yourself. This job holds the claim (and heartbeats it)
  and runs that task after the current one, in a fresh session as you. Claiming the task you are
  executing gives ok:false (it is already in progress), as in AI4J.
- team_release_task: give back a claim this job holds. Releasing your current task ends your
  attempt quietly before your next model call; the coordinator dispatches the task again. A task
  already released max_task_releases times fails instead (dependents blocked, lead told).
- team_reassign_task: hand a claim this job holds to another member. The token stays valid, so the
  task stays in progress; for your current task your session stops and this same job reruns the
  task in a fresh session as the new member (any worker can play any member).
- team_heartbeat_task: a visible heartbeat (counted, phase "heartbeat") on a claim this job holds.
Only claims this job holds can be released, reassigned or heartbeated: the fencing token is what
proves ownership, and other jobs' tokens are never shared. Those calls on other tasks give ok:false.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AliasChoices, Field
from teamctl.shared.agent.result_bounds import cut_to_fit, fitting, json_chars
from teamctl.shared.agent.tools import (
    RESULT_MAX_CHARS,
    ActionResult,
    Fallback,
    NoArgs,
    OptionalText,
    Text,
    ToolArgs,
    Toolbox,
    ToolResult,
    either_case,
)
from teamctl.shared.board import TaskBoard, WriteOutcome, write_outcome
from teamctl.shared.board_pages import PAGE_DEFAULT, PAGE_MAX, page_ids, status_filter
from teamctl.shared.bus import MessageBus
from teamctl.shared.envelopes import Envelope, PeerType
from teamctl.shared.errors import ToolFailed
from teamctl.shared.ids import BROADCAST, RESERVED_MEMBER_IDS, normalize_id
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.text import echoed, one_line, quoted
from teamctl.shared.tracing import NO_SPAN, Span
from teamctl.worker.runs.claims import MAX_HANDOFFS, Claim, ClaimEnd, Claims
from teamctl.worker.runs.mailbox import Mailbox

CURRENT_TASK = "current_task_id"
"""The tools' context key for the task the session executes (the default taskId)."""
PAST_BOUND = "past_bound"
"""release_counted.lua's verdict for a task already released max_task_releases times."""
RELEASE_REASON_CHARS = 200
"""The most of a member's release reason its task keeps (one printable line)."""
WRAPPER_CHARS = 400
"""Room kept for a listing's other keys (action, counts, the note) beside its items."""
READING_TOOLS = frozenset({"team_read_messages", "team_list_tasks"})
"""The team tools that change nothing (a read is acknowledged only before the next model
call): safe to run again when a crash left a call of them in doubt."""

# --- arguments (AI4J's names and aliases; the schema shows the first name) ----------------------

Recipient = Annotated[
    Text,
    Field(
        validation_alias=either_case("toMemberId", "to", "memberId"),
        description="The id of the teammate.",
    ),
]
Content = Annotated[
    Text,
    Fallback(""),
    Field(
        validation_alias=AliasChoices("content", "message", "text"), description="The message text."
    ),
]
TASK_ID = Field(
    validation_alias=either_case("taskId", "id"),
    description="The task id (default: the task you are executing).",
)
MessageTaskId = Annotated[OptionalText, TASK_ID]
"""Optional in the schema; the tool threads the message to the current task."""
HeldTaskId = Annotated[Text, Fallback(context_key=CURRENT_TASK), TASK_ID]
"""Required in the schema (AI4J), yet the current task when left out."""


class SendMessageArgs(ToolArgs):
    """team_send_message: the recipient is required; content defaults to ''."""

    to_member_id: Recipient
    content: Content
    type: OptionalText = Field(None, description="The message type (default peer.message).")
    task_id: MessageTaskId = None


class BroadcastArgs(ToolArgs):
    """team_broadcast: content defaults to ''."""

    content: Content
    type: OptionalText = Field(None, description="The message type (default peer.broadcast).")
    task_id: MessageTaskId = None


class TaskArgs(ToolArgs):
    """team_claim_task and team_heartbeat_task: a task, by default the current one."""

    task_id: HeldTaskId


class ReleaseArgs(TaskArgs):
    """team_release_task."""

    reason: OptionalText = Field(
        None, validation_alias=AliasChoices("reason", "message"), description="Why you release it."
    )


class ListTasksArgs(ToolArgs):
    """team_list_tasks: which page of the board (each a described string, as AI4J's schema
    has them)."""

    status: OptionalText = Field(
        None,
        description="Only tasks of this status: pending, ready, "
        "in_progress, completed, failed or blocked.",
    )
    offset: OptionalText = Field(
        None,
        description="How many matching tasks to skip (default "
        "0; the answer's nextOffset continues).",
    )
    limit: OptionalText = Field(
        None, description=f"Tasks to show, at most {PAGE_MAX} (default {PAGE_DEFAULT})."
    )


class ReassignArgs(TaskArgs):
    """team_reassign_task."""

    to_member_id: Recipient


# --- results (every one starts action, ok, memberId) --------------------------------------------


class TeamResult(ActionResult):
    """What every team tool answers first."""

    member_id: str


class MessageSent(TeamResult):
    """team_send_message and team_broadcast."""

    to_member_id: str | None = None
    """The recipient as the model wrote it (trimmed)."""
    task_id: str | None = None
    reason: str | None = None


class MessageView(ToolResult):
    """A message as team_read_messages shows it (no id, no createdAt; `to` even when null)."""

    KEEP_NONE = frozenset({"to"})

    from_: str = Field(alias="from")
    to: str | None
    type: str
    task_id: str | None = None
    content: str

    @classmethod
    def of(cls, message: Envelope) -> MessageView:
        return cls(
            from_=message.from_,
            to=message.to,
            type=message.type,
            task_id=message.task_id,
            content=message.content,
        )


class MessagesRead(TeamResult):
    """team_read_messages: `messages` only when there are some; `remaining` and `note` only
    when more wait unread than fit one answer."""

    count: int
    has_new_messages: bool
    messages: list[MessageView] | None = None
    remaining: int | None = None
    note: str | None = None


class TaskView(ToolResult):
    """A task state as the tools show it: camelCase, empty values left out, no token."""

    task_id: str
    member_id: str | None = None
    task: str
    context: str | None = None
    depends_on: list[str] | None = None
    status: TaskStatus
    claimed_by: str | None = None
    phase: str
    detail: str | None = None
    percent: int
    heartbeat_count: int
    attempts: int
    output: str | None = None
    error: str | None = None
    duration_ms: int | None = None
    terminal: bool

    @classmethod
    def of(cls, state: TaskState) -> TaskView:
        return cls(
            task_id=state.task_id,
            member_id=state.member_id,
            task=state.task,
            context=state.context,
            depends_on=state.depends_on or None,
            status=state.status,
            claimed_by=state.claimed_by,
            phase=state.phase,
            detail=state.detail,
            percent=state.percent,
            heartbeat_count=state.heartbeat_count,
            attempts=state.attempts,
            output=state.output,
            error=state.error,
            duration_ms=state.duration_ms or None,
            terminal=state.terminal,
        )


class TaskList(TeamResult):
    """team_list_tasks: one page of tasks in plan order, outputs included, with how many match
    and remain after it."""

    tasks: list[TaskView]
    status: str | None = None
    total: int
    offset: int
    remaining: int
    next_offset: int | None = None
    note: str | None = None


class TaskChanged(TeamResult):
    """team_claim_task, team_release_task, team_reassign_task, team_heartbeat_task."""

    task_id: str
    """The taskId as the model wrote it (trimmed)."""
    to_member_id: str | None = None
    note: str | None = None
    reason: str | None = None
    task_state: TaskView | None = None
    """Only when the raw taskId names a task exactly (AI4J matches the string)."""


@dataclass
class MemberToolContext:
    """What the team tools act on, for one member session."""

    board: TaskBoard
    bus: MessageBus
    member_ids: list[str]
    member_id: str
    claim: Claim
    """The claim this session executes (its task is the default taskId)."""
    claims: Claims
    worker: str
    heartbeat_ttl_s: float
    mailbox: Mailbox
    """This session's reads of the member's inbox (acknowledged by the attempt)."""
    max_task_releases: int = 3
    """The run's bound on team_release_task per task (RunOptions.max_task_releases)."""
    result_max_chars: int = RESULT_MAX_CHARS
    """The run's tool_result_max_chars: what team_read_messages and team_list_tasks answer at
    once fits it, and they say what remains."""
    trace: Span = NO_SPAN
    """The session's span: messages sent carry it, for their receivers' links."""


def add_member_tools(toolbox: Toolbox, ctx: MemberToolContext) -> None:
    """Add the eight tools in AI4J's order."""
    context = {CURRENT_TASK: ctx.claim.task_id}
    for name, description, args, fn in MemberTools(ctx).table():
        toolbox.add(name, description, args, fn, context, safe_to_repeat=name in READING_TOOLS)


class MemberTools:
    """The tool functions; each answers a TeamResult (action, ok, memberId first)."""

    def __init__(self, ctx: MemberToolContext) -> None:
        self.ctx = ctx

    def table(self) -> list[tuple[str, str, type[ToolArgs], Callable[[Any], TeamResult]]]:
        """The eight team tools in the contract's order, with their arguments."""
        return [
            (
                "team_send_message",
                "Send a direct message to a teammate. The type defaults to "
                "peer.message; taskId threads the message to a task.",
                SendMessageArgs,
                self.send_message,
            ),
            (
                "team_broadcast",
                "Broadcast a message to the whole team. The type defaults to peer.broadcast.",
                BroadcastArgs,
                self.broadcast,
            ),
            (
                "team_read_messages",
                "Check your mailbox for messages sent to you since your last "
                "read (direct and broadcast), as many as fit one answer; it says how many more "
                "wait. Call it during long tasks.",
                NoArgs,
                self.read_messages,
            ),
            (
                "team_list_tasks",
                "List one page of the shared task states (optional status, "
                "offset, limit), with the outputs of completed tasks; says how many match and "
                "remain.",
                ListTasksArgs,
                self.list_tasks,
            ),
            (
                "team_claim_task",
                "Claim a ready task; you run it after your current task.",
                TaskArgs,
                self.claim_task,
            ),
            (
                "team_release_task",
                "Release a task you hold back to the queue (your current "
                "task: you stop working on it).",
                ReleaseArgs,
                self.release_task,
            ),
            (
                "team_reassign_task",
                "Reassign a task you hold to a teammate, who continues it.",
                ReassignArgs,
                self.reassign_task,
            ),
            (
                "team_heartbeat_task",
                "Heartbeat an in-progress task you hold so timeout recovery skips it.",
                TaskArgs,
                self.heartbeat_task,
            ),
        ]

    # --- messages -----------------------------------------------------------------------------

    def send_message(self, args: SendMessageArgs) -> MessageSent:
        """team_send_message: a direct message to one teammate."""
        task_id = self._message_task_id(args.task_id)
        raw_to = args.to_member_id
        # Checked here too: AI4J's wording ("unknown team member: x") is part of the contract.
        to = raw_to if raw_to == BROADCAST else self._member(raw_to)
        sent = self.ctx.bus.send(
            self.ctx.member_id,
            to,
            args.type or PeerType.MESSAGE,
            task_id,
            args.content,
            self.ctx.trace.traceparent,
        )
        return MessageSent(
            action="team_send_message",
            ok=sent is not None,
            member_id=self.ctx.member_id,
            to_member_id=raw_to,
            task_id=task_id,
            reason=_bus_off(sent),
        )

    def broadcast(self, args: BroadcastArgs) -> MessageSent:
        """team_broadcast: a message to every other member."""
        task_id = self._message_task_id(args.task_id)
        sent = self.ctx.bus.send(
            self.ctx.member_id,
            BROADCAST,
            args.type or PeerType.BROADCAST,
            task_id,
            args.content,
            self.ctx.trace.traceparent,
        )
        return MessageSent(
            action="team_broadcast",
            ok=sent is not None,
            member_id=self.ctx.member_id,
            task_id=task_id,
            reason=_bus_off(sent),
        )

    def read_messages(self, args: NoArgs) -> MessagesRead:
        """team_read_messages: what arrived since the member's last read, once each, as many as
        fit tool_result_max_chars (a first message longer than that alone is cut, saying so);
        the rest stay unread for the next call. The attempt acknowledges them when its next
        model call carries this result."""
        room = self._room()
        page = self.ctx.mailbox.read(room)
        views = [MessageView.of(m).model_dump(mode="json", by_alias=True) for m in page.messages]
        if views and json_chars(views) > room:
            # The script's sizes bound the views' from above, so only a first message alone is
            # too long; a share each keeps any other case within the room, losing no message.
            share = room // len(views)
            views = [cut_to_fit(view, ["content"], share, {"content": "message"}) for view in views]
        more = page.remaining or None
        return MessagesRead(
            action="team_read_messages",
            ok=True,
            member_id=self.ctx.member_id,
            count=len(views),
            has_new_messages=bool(views),
            messages=[MessageView.model_validate(v) for v in views] or None,
            remaining=more,
            note=f"{more} more unread messages: call team_read_messages again to read them"
            if more
            else None,
        )

    def list_tasks(self, args: ListTasksArgs) -> TaskList:
        """team_list_tasks: one page of the board in plan order, outputs included, as many tasks
        as fit tool_result_max_chars (a first task longer than that alone has its texts cut,
        saying so), with how many match and remain."""
        status = status_filter(args.status)
        offset = _whole_number(args.offset, "offset", 0, None) or 0
        limit = _whole_number(args.limit, "limit", 1, PAGE_MAX) or PAGE_DEFAULT
        board = self.ctx.board
        ids, total = page_ids(board.conn, board.keys, status, offset, limit)
        room = self._room()
        views = fitting(
            [TaskView.of(t).model_dump(mode="json", by_alias=True) for t in board.get_many(ids)],
            room,
        )
        cut = bool(views) and json_chars(views) > room
        if cut:
            views = [cut_to_fit(views[0], ["task", "context", "output", "error"], room)]
        remaining = max(total - offset - len(views), 0)
        return TaskList(
            action="team_list_tasks",
            ok=True,
            member_id=self.ctx.member_id,
            tasks=[TaskView.model_validate(v) for v in views],
            status=status,
            total=total,
            offset=offset,
            remaining=remaining,
            next_offset=offset + len(views) if remaining else None,
            note=_page_note(remaining, offset + len(views), cut),
        )

    def _room(self) -> int:
        """What a listing's items may fill: the cap less its other keys."""
        cap = self.ctx.result_max_chars
        return max(cap - WRAPPER_CHARS, cap // 2)

    # --- task claims --------------------------------------------------------------------------

    def claim_task(self, args: TaskArgs) -> TaskChanged:
        """team_claim_task: claim a ready task; this job runs it after the current one."""
        task_id = self._task_id(args.task_id)
        token = (
            self.ctx.board.claim(
                task_id, self.ctx.member_id, self.ctx.worker, self.ctx.heartbeat_ttl_s
            )
            if self._exists(task_id)
            else None
        )
        if token is not None:
            self.ctx.claims.add(Claim(task_id, token, self.ctx.member_id))
        return self._task_result(
            "team_claim_task",
            token is not None,
            args.task_id,
            task_id,
            note="you run it after your current task" if token else None,
        )

    def release_task(self, args: ReleaseArgs) -> TaskChanged:
        """team_release_task: give back a claim this job holds."""
        task_id = self._task_id(args.task_id)
        claim = self._held(task_id)
        ok, failed = False, None
        if claim is not None and self.ctx.claims.end(claim, ClaimEnd.RELEASED):
            ok, failed = self._release(task_id, claim, args.reason)
        note = (
            "your attempt ends; the task goes back to the queue"
            if (ok and claim is self.ctx.claim)
            else None
        )
        if failed:
            note = (
                f"it was released {self.ctx.max_task_releases} times already "
                f"(max_task_releases), so it failed instead: {failed}"
            )
        return self._task_result(
            "team_release_task",
            ok,
            args.task_id,
            task_id,
            note=note,
            reason=None if claim else _not_held(task_id),
        )

    def _release(self, task_id: str, claim: Claim, reason: str | None) -> tuple[bool, str | None]:
        """Give the claim back, counted against max_task_releases; past it the task fails
        (dependents blocked, the lead told by a task.error). Returns (applied, failure error)."""
        board = self.ctx.board
        k = board.keys
        verdict, error = board.scripts["release_counted"](
            keys=[k.task(task_id), k.ready, k.running, k.counts, k.heartbeat(task_id), k.events],
            args=[
                claim.token,
                release_reason(self.ctx.member_id, reason),
                self.ctx.member_id,
                self.ctx.max_task_releases,
            ],
        )
        if verdict != PAST_BOUND:
            return write_outcome(verdict) is WriteOutcome.APPLIED, None
        failed = board.fail(task_id, claim.token, error, announce_as=self.ctx.member_id)
        return failed is WriteOutcome.APPLIED, error

    def reassign_task(self, args: ReassignArgs) -> TaskChanged:
        """team_reassign_task: a teammate continues a task this job holds."""
        task_id = self._task_id(args.task_id)
        to = self._member(args.to_member_id)
        claim = self._held(task_id)
        if claim is not None:
            _check_handoff(claim, to)
        ok = (
            claim is not None
            and self.ctx.board.reassign(task_id, claim.token, to) is WriteOutcome.APPLIED
        )
        if ok and claim is not None:  # ok implies a claim; said again for the type checker
            claim.handoffs += 1
        if ok and claim is self.ctx.claim:
            claim.handed_to = to
        elif ok and claim is not None:
            claim.member_id = to
        return self._task_result(
            "team_reassign_task",
            ok,
            args.task_id,
            task_id,
            to_member_id=args.to_member_id,
            reason=None if claim else _not_held(task_id),
        )

    def heartbeat_task(self, args: TaskArgs) -> TaskChanged:
        """team_heartbeat_task: a visible heartbeat on a claim this job holds."""
        task_id = self._task_id(args.task_id)
        claim = self._held(task_id)
        ok = (
            claim is not None
            and self.ctx.board.heartbeat(
                task_id,
                claim.token,
                self.ctx.heartbeat_ttl_s,
                visible=True,
                member_id=self.ctx.member_id,
            )
            is WriteOutcome.APPLIED
        )
        return self._task_result(
            "team_heartbeat_task",
            ok,
            args.task_id,
            task_id,
            reason=None if claim else _not_held(task_id),
        )

    # --- helpers ------------------------------------------------------------------------------

    def _task_result(
        self, action: str, ok: bool, raw: str, task_id: str, **extra: str | None
    ) -> TaskChanged:
        state = self.ctx.board.get(task_id) if self._exists(task_id) else None
        return TaskChanged(
            action=action,
            ok=ok,
            member_id=self.ctx.member_id,
            task_id=raw,
            task_state=TaskView.of(state) if state else None,
            **extra,
        )

    def _message_task_id(self, raw: str | None) -> str:
        """The task a message threads to, normalized like board ids (the bus refuses other
        shapes); default: the task being executed."""
        if raw is None:
            return self.ctx.claim.task_id
        task_id = normalize_id(raw)
        if task_id is None:
            raise ToolFailed(
                f"taskId {quoted(raw)} names no task; use a task id such as "
                f"{self.ctx.claim.task_id}, or leave it out"
            )
        return task_id

    def _task_id(self, raw: str) -> str:
        """The normalized id the board knows for the raw taskId (reported back as given)."""
        task_id = normalize_id(raw)
        if task_id is None:
            raise ToolFailed("taskId is required")
        return task_id

    def _exists(self, task_id: str) -> bool:
        return task_id in self.ctx.board.task_ids()

    def _held(self, task_id: str) -> Claim | None:
        claim = self.ctx.claims.get(task_id)
        return claim if claim is not None and claim.live else None

    def _member(self, raw: str) -> str:
        member_id = normalize_id(raw)
        if (
            member_id is None
            or member_id in RESERVED_MEMBER_IDS
            or (member_id not in self.ctx.member_ids)
        ):
            raise ToolFailed(
                f"unknown team member: {echoed(raw)}; use one of: {', '.join(self.ctx.member_ids)}"
            )
        return member_id


def _whole_number(raw: str | None, name: str, least: int, most: int | None) -> int | None:
    """A paging argument given as text (None when left out); ToolFailed saying the range."""
    if raw is None:
        return None
    bound = f"from {least} to {most}" if most is not None else f"{least} or more"
    try:
        value = int(raw)
    except ValueError:
        raise ToolFailed(f"{name} {echoed(raw)} is not a whole number; give {bound}") from None
    if value < least or (most is not None and value > most):
        raise ToolFailed(f"{name} {value} is out of range; give {bound}")
    return value


def _page_note(remaining: int, next_offset: int, cut: bool) -> str | None:
    """What a page of team_list_tasks says of what it left out."""
    parts = []
    if cut:
        parts.append("this task's texts were cut to fit tool_result_max_chars")
    if remaining:
        parts.append(
            f"{remaining} more tasks: call team_list_tasks with offset={next_offset} "
            "for the next page"
        )
    return "; ".join(parts) or None


def release_reason(member_id: str, said: str | None) -> str:
    """A member's release as its task's requeue_reason: the runtime's words, quoting the
    member's reason (printable, on one line, bounded), so nobody mistakes it for the runtime's
    own (the journal is replayed only on reclaim.lua's flag, whatever a reason says)."""
    text = one_line(said, RELEASE_REASON_CHARS)
    return f'released by {member_id}: "{text}"' if text else f"released by {member_id}"


def _check_handoff(claim: Claim, to: str) -> None:
    if to == claim.member_id:
        raise ToolFailed(f"{to} already holds {claim.task_id}; reassign it to another member")
    if claim.handoffs >= MAX_HANDOFFS:
        raise ToolFailed(
            f"{claim.task_id} was already reassigned {MAX_HANDOFFS} times; finish it or release it"
        )


def _bus_off(sent: Envelope | None) -> str | None:
    return None if sent is not None else "the message bus is disabled for this run"


def _not_held(task_id: str) -> str:
    return f"you do not hold a claim on {echoed(task_id)}"
