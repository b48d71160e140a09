"""The eight team tools (AI4J names, parameters and result shapes), made distributed.

What the task tools mean when any worker can run any member:
- team_claim_task: claim a READY task for yourself. This job holds the claim (and heartbeats it)
  and runs that task after the current one, in a fresh session as you. Claiming the task you are
  executing gives ok:false (it is already in progress), as in AI4J.
- team_release_task: give back a claim this job holds. Releasing your current task ends your
  attempt quietly before your next model call; the coordinator dispatches the task again.
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
from typing import Any

from teamctl.shared.agent.tools import Toolbox, first_string, string_property
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.bus import MessageBus
from teamctl.shared.errors import ToolFailed
from teamctl.shared.ids import BROADCAST, RESERVED_MEMBER_IDS, normalize_id
from teamctl.shared.models import Envelope, TaskState
from teamctl.shared.text import quoted
from teamctl.worker.claims import MAX_HANDOFFS, Claim, ClaimEnd, Claims
from teamctl.worker.mailbox import Mailbox

TO_ALIASES = ("toMemberId", "to_member_id", "to", "memberId", "member_id")
CONTENT_ALIASES = ("content", "message", "text")
TASK_ALIASES = ("taskId", "task_id", "id")
REASON_ALIASES = ("reason", "message")


@dataclass
class TeamContext:
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


def add_team_tools(toolbox: Toolbox, ctx: TeamContext) -> None:
    """Add the eight tools in AI4J's order."""
    tools = TeamTools(ctx)
    for name, description, properties, required, fn in tools.table():
        toolbox.add(name, description, {p: string_property(d) for p, d in properties},
                    required, fn)


class TeamTools:
    """The tool functions; each returns a JSON-ready dict starting action, ok, memberId."""

    def __init__(self, ctx: TeamContext) -> None:
        self.ctx = ctx

    def table(self) -> list[tuple[str, str, list[tuple[str, str]], list[str],
                                  Callable[[dict[str, Any]], dict[str, Any]]]]:
        """The eight team tools in the contract's order, with their parameters."""
        to = ("toMemberId", "The id of the teammate.")
        task = ("taskId", "The task id (default: the task you are executing).")
        content = ("content", "The message text.")
        kind = ("type", "The message type.")
        return [
            ("team_send_message", "Send a direct message to a teammate. The type defaults to "
             "peer.message; taskId threads the message to a task.",
             [to, content, (kind[0], "The message type (default peer.message)."), task],
             ["toMemberId", "content"], self.send_message),
            ("team_broadcast", "Broadcast a message to the whole team. The type defaults to "
             "peer.broadcast.",
             [content, (kind[0], "The message type (default peer.broadcast)."), task],
             ["content"], self.broadcast),
            ("team_read_messages", "Check your mailbox for messages sent to you since your last "
             "read (direct and broadcast). Call it during long tasks.", [], [],
             self.read_messages),
            ("team_list_tasks", "List the current shared task states, with the outputs of "
             "completed tasks.", [], [], self.list_tasks),
            ("team_claim_task", "Claim a ready task; you run it after your current task.",
             [task], ["taskId"], self.claim_task),
            ("team_release_task", "Release a task you hold back to the queue (your current "
             "task: you stop working on it).",
             [task, ("reason", "Why you release it.")], ["taskId"], self.release_task),
            ("team_reassign_task", "Reassign a task you hold to a teammate, who continues it.",
             [task, to], ["taskId", "toMemberId"], self.reassign_task),
            ("team_heartbeat_task", "Heartbeat an in-progress task you hold so timeout recovery "
             "skips it.", [task], ["taskId"], self.heartbeat_task),
        ]

    # --- messages -----------------------------------------------------------------------------

    def send_message(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_send_message: a direct message to one teammate."""
        raw_to = first_string(arguments, *TO_ALIASES)
        if raw_to is None:
            raise ToolFailed("toMemberId is required")
        task_id = self._message_task_id(arguments)
        kind = first_string(arguments, "type") or "peer.message"
        # Checked here too: AI4J's wording ("unknown team member: x") is part of the contract.
        to = raw_to if raw_to == BROADCAST else self._member(raw_to)
        sent = self.ctx.bus.send(self.ctx.member_id, to, kind, task_id, _content(arguments))
        return self._result("team_send_message", sent is not None, toMemberId=raw_to,
                            taskId=task_id, **_bus_off(sent))

    def broadcast(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_broadcast: a message to every other member."""
        task_id = self._message_task_id(arguments)
        kind = first_string(arguments, "type") or "peer.broadcast"
        sent = self.ctx.bus.send(self.ctx.member_id, BROADCAST, kind, task_id,
                                 _content(arguments))
        return self._result("team_broadcast", sent is not None, taskId=task_id, **_bus_off(sent))

    def read_messages(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_read_messages: what arrived since the member's last read, once each (the attempt
        acknowledges them when its next model call carries this result)."""
        messages = self.ctx.mailbox.read()
        extra: dict[str, Any] = {"count": len(messages), "hasNewMessages": bool(messages)}
        if messages:
            extra["messages"] = [_message_view(m) for m in messages]
        return self._result("team_read_messages", True, **extra)

    def list_tasks(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_list_tasks: every task's state, outputs included."""
        return self._result("team_list_tasks", True,
                            tasks=[task_view(t) for t in self.ctx.board.snapshot()])

    # --- task claims --------------------------------------------------------------------------

    def claim_task(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_claim_task: claim a ready task; this job runs it after the current one."""
        raw, task_id = self._task_ids(arguments)
        token = self.ctx.board.claim(task_id, self.ctx.member_id, self.ctx.worker,
                                     self.ctx.heartbeat_ttl_s) if self._exists(task_id) else None
        if token is not None:
            self.ctx.claims.add(Claim(task_id, token, self.ctx.member_id))
        return self._task_result("team_claim_task", token is not None, raw, task_id,
                                 note="you run it after your current task" if token else None)

    def release_task(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_release_task: give back a claim this job holds."""
        raw, task_id = self._task_ids(arguments)
        claim = self._held(task_id)
        ok = False
        if claim is not None and self.ctx.claims.end(claim, ClaimEnd.RELEASED):
            reason = first_string(arguments, *REASON_ALIASES)
            ok = self.ctx.board.release(task_id, claim.token, reason) is WriteOutcome.APPLIED
        note = "your attempt ends; the task goes back to the queue" if (
            ok and claim is self.ctx.claim) else None
        return self._task_result("team_release_task", ok, raw, task_id, note=note,
                                 reason=None if claim else _not_held(task_id))

    def reassign_task(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_reassign_task: a teammate continues a task this job holds."""
        raw, task_id = self._task_ids(arguments)
        raw_to = first_string(arguments, *TO_ALIASES)
        if raw_to is None:
            raise ToolFailed("toMemberId is required")
        to = self._member(raw_to)
        claim = self._held(task_id)
        if claim is not None:
            _check_handoff(claim, to)
        ok = claim is not None and self.ctx.board.reassign(
            task_id, claim.token, to) is WriteOutcome.APPLIED
        if ok:
            claim.handoffs += 1
        if ok and claim is self.ctx.claim:
            claim.handed_to = to
        elif ok and claim is not None:
            claim.member_id = to
        return self._task_result("team_reassign_task", ok, raw, task_id, toMemberId=raw_to,
                                 reason=None if claim else _not_held(task_id))

    def heartbeat_task(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """team_heartbeat_task: a visible heartbeat on a claim this job holds."""
        raw, task_id = self._task_ids(arguments)
        claim = self._held(task_id)
        ok = claim is not None and self.ctx.board.heartbeat(
            task_id, claim.token, self.ctx.heartbeat_ttl_s, visible=True,
            member_id=self.ctx.member_id) is WriteOutcome.APPLIED
        return self._task_result("team_heartbeat_task", ok, raw, task_id,
                                 reason=None if claim else _not_held(task_id))

    # --- helpers ------------------------------------------------------------------------------

    def _result(self, action: str, ok: bool, **extra: Any) -> dict[str, Any]:
        base = {"action": action, "ok": ok, "memberId": self.ctx.member_id}
        return base | {k: v for k, v in extra.items() if v is not None}

    def _task_result(self, action: str, ok: bool, raw: str, task_id: str,
                     **extra: Any) -> dict[str, Any]:
        state = self.ctx.board.get(task_id) if self._exists(task_id) else None
        return self._result(action, ok, taskId=raw, **extra,
                            taskState=task_view(state) if state else None)

    def _task_arg(self, arguments: dict[str, Any]) -> str:
        return first_string(arguments, *TASK_ALIASES) or self.ctx.claim.task_id

    def _message_task_id(self, arguments: dict[str, Any]) -> str:
        """The task a message threads to, normalized like board ids (the bus refuses other
        shapes); default: the task being executed."""
        raw = first_string(arguments, *TASK_ALIASES)
        if raw is None:
            return self.ctx.claim.task_id
        task_id = normalize_id(raw)
        if task_id is None:
            raise ToolFailed(f"taskId {quoted(raw)} names no task; use a task id such as "
                             f"{self.ctx.claim.task_id}, or leave it out")
        return task_id

    def _task_ids(self, arguments: dict[str, Any]) -> tuple[str, str]:
        """The raw taskId (reported back) and the normalized id the board knows."""
        raw = self._task_arg(arguments)
        task_id = normalize_id(raw)
        if task_id is None:
            raise ToolFailed("taskId is required")
        return raw, task_id

    def _exists(self, task_id: str) -> bool:
        return task_id in self.ctx.board.task_ids()

    def _held(self, task_id: str) -> Claim | None:
        claim = self.ctx.claims.get(task_id)
        return claim if claim is not None and claim.live else None

    def _member(self, raw: str) -> str:
        member_id = normalize_id(raw)
        if member_id is None or member_id in RESERVED_MEMBER_IDS or (
                member_id not in self.ctx.member_ids):
            raise ToolFailed(f"unknown team member: {raw}; use one of: "
                             f"{', '.join(self.ctx.member_ids)}")
        return member_id


def _check_handoff(claim: Claim, to: str) -> None:
    if to == claim.member_id:
        raise ToolFailed(f"{to} already holds {claim.task_id}; reassign it to another member")
    if claim.handoffs >= MAX_HANDOFFS:
        raise ToolFailed(f"{claim.task_id} was already reassigned {MAX_HANDOFFS} times; "
                         "finish it or release it")


def _content(arguments: dict[str, Any]) -> str:
    return first_string(arguments, *CONTENT_ALIASES) or ""


def _bus_off(sent: Envelope | None) -> dict[str, str]:
    return {} if sent is not None else {"reason": "the message bus is disabled for this run"}


def _not_held(task_id: str) -> str:
    return f"you do not hold a claim on {task_id}"


def _message_view(message: Envelope) -> dict[str, Any]:
    view: dict[str, Any] = {"from": message.from_, "to": message.to, "type": message.type}
    if message.task_id is not None:
        view["taskId"] = message.task_id
    view["content"] = message.content
    return view


def task_view(state: TaskState) -> dict[str, Any]:
    """A task state as the tools show it: camelCase, empty values left out, no token."""
    view = {
        "taskId": state.task_id, "memberId": state.member_id, "task": state.task,
        "context": state.context, "dependsOn": state.depends_on or None,
        "status": state.status.value, "claimedBy": state.claimed_by, "phase": state.phase,
        "detail": state.detail, "percent": state.percent,
        "heartbeatCount": state.heartbeat_count, "attempts": state.attempts,
        "output": state.output, "error": state.error, "durationMs": state.duration_ms or None,
        "terminal": state.terminal,
    }
    return {k: v for k, v in view.items() if v is not None}
