"""The tools a persistent teammate's model may call during a turn (typed ToolArgs).

A turn runs each tool call `writing_through` a store whose scripts are guarded by the call
(TeamStore.guarded): every team write is token-checked and recorded with its outcome in the same
script, so a turn rerun after a crash replays the call's writes instead of sending, answering or
submitting twice; that covers task claims and
completions (shared/teams/tasks.py) too. Workspace tools have no such record and may repeat.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from teamctl.shared.agent.tools import (
    RESULT_MAX_CHARS,
    NoArgs,
    OptionalText,
    Text,
    ToolArgs,
    Toolbox,
)
from teamctl.shared.teams.inbox import unread_batch
from teamctl.shared.teams.task_pages import (
    GET_TASK_DESCRIPTION,
    LIST_TASKS_DESCRIPTION,
    GetTaskArgs,
    ListTasksArgs,
    get_task,
    list_tasks,
)
from teamctl.shared.teams.tasks import TeamTasks, task_id_of
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.tracing import NO_SPAN, Span


class SendArgs(ToolArgs):
    """send_message: one recipient (a teammate or `lead`) and the text."""

    to: Text
    """A teammate's name, or lead."""
    content: Text
    """The message."""
    type: OptionalText = None
    """The message type (default peer.message); protocol types are sent by their tools."""


class RespondShutdownArgs(ToolArgs):
    """respond_shutdown: the lead's shutdown request and your answer."""

    request_id: Text
    """The request_id of the shutdown_request in your inbox."""
    approve: bool
    """true to shut down after this step, false to keep working."""
    reason: OptionalText = None
    """Why (optional)."""


class SubmitPlanArgs(ToolArgs):
    """submit_plan: the plan the lead is asked to approve."""

    plan: Text
    """What you will do, step by step."""


class BroadcastArgs(ToolArgs):
    """broadcast: the text every other teammate (and the lead) gets."""

    content: Text
    """The message."""


class TaskIdArgs(ToolArgs):
    """claim_task: the task to take."""

    task_id: Text
    """A ready task's id (task_<n>, from list_tasks)."""


class CompleteTaskArgs(ToolArgs):
    """complete_task: the task you hold and what it produced."""

    task_id: Text
    """The id of a task you hold."""
    result: Text
    """What you produced (the lead receives it)."""


class TeammateTools:
    """The team tools of one teammate's turn; `idle_requested` is set once the model calls idle.
    Plan mode gates claim_task and complete_task (worker/teams/teammate_workspace.py gate_plan).
    Task claims and completions carry the turn's token (`token`, else the one turn_begin
    recorded on the teammate, read once here: this turn's), so a revoked turn's are refused."""

    def __init__(self, store: TeamStore, name: str, token: str | None = None) -> None:
        self.store = store
        self.name = name
        self.idle_requested = threading.Event()
        self.trace: Span = NO_SPAN
        """The current turn's span: messages sent carry it, for their receivers' links."""
        self.token = token if token is not None else store.get(name).turn_token or ""

    @property
    def tasks(self) -> TeamTasks:
        """The board through the current store, so a tool call's claims are guarded too."""
        return TeamTasks(self.store)

    @contextmanager
    def writing_through(self, store: TeamStore) -> Iterator[None]:
        """Run the tools of one call against `store` (a guarded one), then the turn's own."""
        own, self.store = self.store, store
        try:
            yield
        finally:
            self.store = own

    def toolbox(self, max_result_chars: int = RESULT_MAX_CHARS) -> Toolbox:
        """The team tools, in a Toolbox that cuts any result to `max_result_chars` (the team's
        tool_result_max_chars)."""
        box = Toolbox(max_result_chars=max_result_chars)
        box.add(
            "send_message",
            "Send a message to one teammate, or to lead.",
            SendArgs,
            self.send_message,
        )
        box.add(
            "broadcast",
            "Send a message to every other teammate and the lead.",
            BroadcastArgs,
            self.broadcast,
        )
        box.add(
            "read_inbox",
            "Show the first unread messages (up to the team's batch; they "
            "also reach you before your next step) and how many more remain.",
            NoArgs,
            self.read_inbox,
        )
        box.add(
            "list_teammates",
            "List the team's teammates, roles and statuses.",
            NoArgs,
            self.list_teammates,
        )
        box.add(
            "respond_shutdown",
            "Answer the lead's shutdown_request: approve to shut down "
            "after this step, reject to keep working.",
            RespondShutdownArgs,
            self.respond_shutdown,
        )
        box.add(
            "submit_plan",
            "In plan mode: ask the lead to approve your plan (one pending at "
            "a time); the answer arrives as a plan_approval_response.",
            SubmitPlanArgs,
            self.submit_plan,
        )
        box.add("list_tasks", LIST_TASKS_DESCRIPTION, ListTasksArgs, self.list_tasks)
        box.add("get_task", GET_TASK_DESCRIPTION, GetTaskArgs, self.get_task)
        box.add(
            "claim_task",
            "Take a ready task from the team task board (yours to finish with complete_task).",
            TaskIdArgs,
            self.claim_task,
        )
        box.add(
            "complete_task",
            "Finish a task you hold with its result; tasks waiting for it may become ready.",
            CompleteTaskArgs,
            self.complete_task,
        )
        box.add("idle", "End your turn and wait for the next message.", NoArgs, self.idle)
        return box

    def send_message(self, args: SendArgs) -> dict[str, Any]:
        message, woke = self.store.messages.send(
            self.name, args.to, args.content, type_=args.type, traceparent=self.trace.traceparent
        )
        return {
            "action": "send_message",
            "ok": True,
            "id": message.id,
            "to": message.to,
            "woke": woke,
        }

    def broadcast(self, args: BroadcastArgs) -> dict[str, Any]:
        message, woke = self.store.messages.broadcast(
            self.name, args.content, traceparent=self.trace.traceparent
        )
        return {
            "action": "broadcast",
            "ok": True,
            "id": message.id,
            "recipients": len([n for n in self.store.names() if n != self.name]) + 1,
            "woke": woke,
        }

    def read_inbox(self, _args: NoArgs) -> dict[str, Any]:
        return unread_batch(self.store, self.name).answer()

    def list_teammates(self, _args: NoArgs) -> dict[str, Any]:
        return {
            "action": "list_teammates",
            "ok": True,
            "teammates": [
                {"name": m.name, "role": m.role, "status": m.status.value}
                for m in self.store.teammates()
            ],
        }

    def respond_shutdown(self, args: RespondShutdownArgs) -> dict[str, Any]:
        """Resolve the request; an approval also ends the turn after this step."""
        message_id = self.store.requests.respond_shutdown(
            self.name, args.request_id, args.approve, args.reason or ""
        )
        if args.approve:
            self.idle_requested.set()
        return {
            "action": "respond_shutdown",
            "ok": True,
            "request_id": args.request_id,
            "approve": args.approve,
            "id": message_id,
        }

    def submit_plan(self, args: SubmitPlanArgs) -> dict[str, Any]:
        record = self.store.requests.submit_plan(self.name, args.plan)
        return {
            "action": "submit_plan",
            "ok": True,
            "request_id": record.id,
            "status": record.status.value,
        }

    def list_tasks(self, args: ListTasksArgs) -> dict[str, Any]:
        return list_tasks(self.store, args, self.store.options)

    def get_task(self, args: GetTaskArgs) -> dict[str, Any]:
        return get_task(self.store, args, self.store.options)

    def claim_task(self, args: TaskIdArgs) -> dict[str, Any]:
        task = self.tasks.claim(self.name, self.token, args.task_id)
        return {
            "action": "claim_task",
            "ok": True,
            "task_id": task.task_id,
            "subject": task.subject,
            "description": task.description,
        }

    def complete_task(self, args: CompleteTaskArgs) -> dict[str, Any]:
        task_id = task_id_of(args.task_id)
        ready, woke = self.tasks.complete(self.name, self.token, task_id, args.result)
        return {
            "action": "complete_task",
            "ok": True,
            "task_id": task_id,
            "now_ready": ready,
            "woke": woke,
        }

    def idle(self, _args: NoArgs) -> dict[str, Any]:
        self.idle_requested.set()
        return {"action": "idle", "ok": True}
