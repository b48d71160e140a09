"""The tools of the lead agent of a persistent team (typed ToolArgs): spawn and list teammates,
message them, read its own inbox, and the lead's side of the shutdown and plan protocols.

Every result is a JSON object starting with `action` and `ok`; a refusal (bad name, unknown
teammate or request, a working teammate, a tool or model the team does not let the lead grant)
raises and reaches the model as a tool error, having changed nothing. The lead writes as `lead`,
the same as a person at `teamctl team ...`, but grants only what the team file's `[teammates]`
table lists as grantable: a person's `teamctl team spawn` is not limited so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamctl.shared.agent.tools import NoArgs, OptionalText, Text, ToolArgs, Toolbox
from teamctl.shared.bus import LEAD
from teamctl.shared.errors import ConfigError
from teamctl.shared.teams.inbox import unread_batch
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.task_pages import (
    GET_TASK_DESCRIPTION,
    LIST_TASKS_DESCRIPTION,
    GetTaskArgs,
    ListTasksArgs,
    get_task,
    list_tasks,
)
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import DEFAULT_QUEUE, load_teammate_python_tools
from teamctl.shared.text import quoted
from teamctl.shared.tracing import NO_SPAN, Span


class NotGrantable(ConfigError):
    """The lead asked for a tool, MCP entry or model the team does not let it grant."""


class SpawnArgs(ToolArgs):
    """spawn_teammate: who, in which role, doing what first."""

    name: Text
    """The teammate's name: lowercase letters, digits, '_' or '-', starting with a letter."""
    role: Text
    """Its role, e.g. 'reviewer'."""
    prompt: Text
    """What it should do first (its first message)."""
    model: OptionalText = None
    """Its model (default: the lead's; another only if the team lists it as grantable)."""
    fallbacks: list[str] | None = None
    """Models it tries in order when its own cannot answer, among the models you may grant
    (default: your own fallbacks; [] for none)."""
    plan_mode: bool = False
    """true: it must have a plan approved (review_plan) before it changes anything."""
    tools: list[str] = []
    """Tools it may use in the team's workspace, among those the team lets you grant (the
    spawn_teammate description lists them; default: none)."""
    mcp: list[str] = []
    """Tools of the team's MCP servers it may use, among those the team lets you grant: a
    server's name for all its tools, or 'server:tool' for one (default: none)."""


class SendArgs(ToolArgs):
    """send_message: one teammate and the text."""

    to: Text
    """A teammate's name."""
    content: Text
    """The message."""


class BroadcastArgs(ToolArgs):
    """broadcast: the text every teammate gets."""

    content: Text
    """The message."""


class ShutdownArgs(ToolArgs):
    """request_shutdown: the teammate asked to stop, and why."""

    name: Text
    """The teammate's name."""
    reason: OptionalText = None
    """Why (optional; the teammate sees it)."""


class ReviewArgs(ToolArgs):
    """review_plan: the plan request and the verdict."""

    request_id: Text
    """The request_id of the plan_approval_request in your inbox."""
    approve: bool
    """true to let the teammate carry the plan out, false to have it revise the plan."""
    feedback: OptionalText = None
    """What to keep or change (optional)."""


class CreateTaskArgs(ToolArgs):
    """create_task: what is to be done, by whom, after what."""

    subject: Text
    """What is to be done, in a line."""
    description: OptionalText = None
    """The details (optional)."""
    role: OptionalText = None
    """Only a teammate of this role takes it (optional)."""
    assignee: OptionalText = None
    """Reserve it for this teammate (optional)."""
    after: list[str] = []
    """Ids of tasks that must complete first (optional)."""


class LeadTools:
    """The lead's team tools on one team; teammates it spawns default to the lead's model and
    share the team's `workspace` directory."""

    def __init__(
        self,
        store: TeamStore,
        model: str,
        api_base: str | None,
        workspace: Path,
        queue: str = DEFAULT_QUEUE,
        fallbacks: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.model = model
        self.fallbacks = list(fallbacks)
        """The lead's own fallback models: granted to it, so it may grant them."""
        self.api_base = api_base
        self.workspace = workspace
        self.queue = queue
        self.trace: Span = NO_SPAN
        """The lead's current turn's span: what it sends or adds carries it, for the links of
        the turns it wakes."""

    def options(self) -> TeamOptions:
        """The team's options; the defaults before the team exists (a spawn creates it so)."""
        return self.store.options if self.store.exists() else TeamOptions()

    def add_to(self, box: Toolbox) -> None:
        """Register the team tools on `box`, in the order the model sees them."""
        box.add(
            "spawn_teammate",
            "Start a teammate (or restart an idle or shut-down one with a "
            "new role and prompt); its first turn starts at once. "
            + grants_text(self.options(), self.model, self.fallbacks),
            SpawnArgs,
            self.spawn_teammate,
        )
        box.add(
            "list_teammates",
            "List the teammates: role, status (working, idle, shutdown), "
            "and why each last went idle.",
            NoArgs,
            self.list_teammates,
        )
        box.add(
            "send_message",
            "Send a message to one teammate (waking it if idle).",
            SendArgs,
            self.send_message,
        )
        box.add(
            "broadcast",
            "Send a message to every teammate (waking the idle ones).",
            BroadcastArgs,
            self.broadcast,
        )
        box.add(
            "read_inbox",
            "Show your first unread messages (up to the team's batch; they "
            "also reach you before your next step, once) and how many more remain.",
            NoArgs,
            self.read_inbox,
        )
        box.add(
            "request_shutdown",
            "Ask a teammate to shut down; it answers with a shutdown_response in your inbox.",
            ShutdownArgs,
            self.request_shutdown,
        )
        box.add(
            "review_plan",
            "Approve or reject a teammate's plan_approval_request.",
            ReviewArgs,
            self.review_plan,
        )
        box.add(
            "create_task",
            "Add a task to the team task board; once ready (its 'after' "
            "tasks completed) an idle teammate that fits claims it.",
            CreateTaskArgs,
            self.create_task,
        )
        box.add("list_tasks", LIST_TASKS_DESCRIPTION, ListTasksArgs, self.list_tasks)
        box.add("get_task", GET_TASK_DESCRIPTION, GetTaskArgs, self.get_task)

    def spawn_teammate(self, args: SpawnArgs) -> dict[str, Any]:
        check_grants(self.options(), self.model, args, self.fallbacks)
        load_teammate_python_tools(args.tools)  # as `team spawn`: a refusal is the model's error
        # A re-spawn keeps what a person chose: the queue (which workers, and so which secrets,
        # serve it) and plan mode (an approval gate the lead cannot lift).
        known = self.store.get(args.name) if args.name in self.store.names() else None
        model = args.model or self.model
        fallbacks = self.fallbacks if args.fallbacks is None else args.fallbacks
        teammate = self.store.spawn(
            args.name,
            role=args.role,
            prompt=args.prompt,
            model=model,
            api_base=self.api_base,
            fallbacks=[name for name in fallbacks if name != model],
            queue=known.queue if known else self.queue,
            plan_mode=args.plan_mode or bool(known and known.plan_state),
            tools=args.tools,
            mcp=args.mcp,
            workspace=self.workspace,
        )
        return {
            "action": "spawn_teammate",
            "ok": True,
            "name": teammate.name,
            "role": teammate.role,
            "status": teammate.status.value,
            "model": teammate.model,
            "fallbacks": teammate.fallbacks,
            "tools": teammate.tools,
            "mcp": teammate.mcp,
            "plan_mode": bool(teammate.plan_state),
        }

    def list_teammates(self, _args: NoArgs) -> dict[str, Any]:
        return {
            "action": "list_teammates",
            "ok": True,
            "teammates": [
                {
                    "name": m.name,
                    "role": m.role,
                    "status": m.status.value,
                    "idle_reason": m.idle_reason,
                    "last_error": m.last_error,
                }
                for m in self.store.teammates()
            ],
        }

    def send_message(self, args: SendArgs) -> dict[str, Any]:
        message, woke = self.store.messages.send(
            LEAD, args.to, args.content, traceparent=self.trace.traceparent
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
            LEAD, args.content, traceparent=self.trace.traceparent
        )
        return {
            "action": "broadcast",
            "ok": True,
            "id": message.id,
            "recipients": len(self.store.names()),
            "woke": woke,
        }

    def read_inbox(self, _args: NoArgs) -> dict[str, Any]:
        return unread_batch(self.store, LEAD, self.options()).answer()

    def request_shutdown(self, args: ShutdownArgs) -> dict[str, Any]:
        record, woke = self.store.requests.request_shutdown(args.name, args.reason or "")
        return {
            "action": "request_shutdown",
            "ok": True,
            "request_id": record.id,
            "to": record.to,
            "status": record.status.value,
            "woke": woke,
        }

    def review_plan(self, args: ReviewArgs) -> dict[str, Any]:
        message_id, woke = self.store.requests.review_plan(
            args.request_id, args.approve, args.feedback or ""
        )
        return {
            "action": "review_plan",
            "ok": True,
            "request_id": args.request_id,
            "approve": args.approve,
            "id": message_id,
            "woke": woke,
        }

    def create_task(self, args: CreateTaskArgs) -> dict[str, Any]:
        task, woken = TeamTasks(self.store).add(
            args.subject,
            description=args.description or "",
            role=args.role or "",
            assignee=args.assignee or "",
            after=args.after,
            traceparent=self.trace.traceparent,
        )
        return {
            "action": "create_task",
            "ok": True,
            "task_id": task.task_id,
            "status": task.status.value,
            "owner": task.owner,
            "woke": woken,
        }

    def list_tasks(self, args: ListTasksArgs) -> dict[str, Any]:
        return list_tasks(self.store, args, self.options())

    def get_task(self, args: GetTaskArgs) -> dict[str, Any]:
        return get_task(self.store, args, self.options())


def grants_text(options: TeamOptions, lead_model: str, lead_fallbacks: Sequence[str] = ()) -> str:
    """What the lead may give a teammate, as its spawn_teammate description says it."""
    models = ", ".join(dict.fromkeys([lead_model, *options.grantable_models]))
    text = (
        f"Tools you may grant: {', '.join(options.grantable_tools) or '(none)'}; MCP "
        f"entries: {', '.join(options.grantable_mcp) or '(none)'}; models: {models}."
    )
    extra = [name for name in lead_fallbacks if name not in (lead_model, *options.grantable_models)]
    return text + (f" Fallback models also: {', '.join(extra)}." if extra else "")


def check_grants(
    options: TeamOptions, lead_model: str, args: SpawnArgs, lead_fallbacks: Sequence[str] = ()
) -> None:
    """NotGrantable naming what is allowed unless every tool, MCP entry, the model and each
    fallback model asked for is one the team's `[teammates]` table lets the lead grant (a
    fallback may also be one of the lead's own); a re-spawn too: the record then holds only
    these."""
    tools = [tool for tool in args.tools if tool not in options.grantable_tools]
    if tools:
        raise NotGrantable(
            f"tool {quoted(tools[0])} is not yours to grant; tools you may "
            f"grant: {', '.join(options.grantable_tools) or '(none)'} (a person "
            "lists more in the team file's [teammates] grantable_tools)"
        )
    entries = [entry for entry in args.mcp if not options.may_grant_mcp(entry)]
    if entries:
        raise NotGrantable(
            f"mcp entry {quoted(entries[0])} is not yours to grant; MCP entries "
            f"you may grant: {', '.join(options.grantable_mcp) or '(none)'} (a "
            "person lists them in the team file's [teammates] grantable_mcp)"
        )
    if args.model and args.model != lead_model and args.model not in options.grantable_models:
        allowed = ", ".join(dict.fromkeys([lead_model, *options.grantable_models]))
        raise NotGrantable(
            f"model {quoted(args.model)} is not yours to grant; models you may "
            f"give a teammate: {allowed} (a person lists more in the team "
            "file's [teammates] grantable_models)"
        )
    grantable = list(dict.fromkeys([lead_model, *options.grantable_models, *lead_fallbacks]))
    refused = [name for name in args.fallbacks or () if name not in grantable]
    if refused:
        raise NotGrantable(
            f"fallback model {quoted(refused[0])} is not yours to grant; models "
            f"you may give a teammate as fallbacks: {', '.join(grantable)} (a "
            "person lists more in the team file's [teammates] grantable_models)"
        )
