"""Messages on a bus (a run's or a team's): system notices, peer messages and protocol messages,
one union discriminated on `type`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter
from teamctl.shared.redis.hash_fields import BLANK_IS_NONE, HashText


class SystemType(StrEnum):
    """Message types only the runtime publishes; a member is refused them (and every other type
    in their namespaces, SYSTEM_NAMESPACES)."""

    TASK_ASSIGNED = "task.assigned"
    """From `system` to the member given a task (a team's: wake_for_tasks.lua, turn_end.lua)."""
    TASK_RESULT = "task.result"
    """From the member to lead, written with the outcome by complete.lua (a team's:
    team_task_complete.lua)."""
    TASK_REMINDER = "task.reminder"
    """From `system` to a teammate ending its turn while it holds a team task (turn_end.lua):
    its one reminder before the task goes back to the board."""
    TASK_RELEASED = "task.released"
    """From `system` to lead: a teammate ended two turns holding a team task, which went back
    to the board (turn_end.lua); the lead may reassign it."""
    TASK_FAILED = "task.failed"
    """From `system` to lead: a team task went back to the board max_task_releases times and
    its holder gave it up once more, so it failed (turn_end.lua); sent once."""
    TASK_ERROR = "task.error"
    """From the member to lead, written with the outcome by fail.lua and reclaim.lua."""
    RUN_COMPLETE = "run.complete"
    """The run's end notices (run_finish.lua), see `ending`."""
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_WARNING = "run.warning"
    RUN_BUDGET_EXCEEDED = "run.budget_exceeded"
    RUN_AWAITING_BUDGET = "run.awaiting_budget"
    """From `system` to lead: the run paused, its budget spent; sent once per pause."""
    RUN_BUDGET_ADDED = "run.budget_added"
    """From `system` to lead: `teamctl budget` raised the budget and the paused run resumed."""
    PLAN_APPROVED = "plan.approved"
    PLAN_REJECTED = "plan.rejected"
    HOOK_ERROR = "hook.error"
    MODEL_FALLBACK = "model.fallback"
    """From `system` to lead in a run: a member's model call was answered by a fallback model
    (which, and why each model before it was passed over)."""
    INBOX_SUMMARY = "inbox.summary"
    """To a team's lead from `system`: the oldest unread notices past lead_inbox_max_messages,
    folded into one (counts by type, the teammates and tasks named; lead_inbox_fold.lua)."""
    TEAMMATE_IDLE = "teammate.idle"
    """To lead from `system`: a teammate ended its turn and went idle (turn_end.lua)."""
    TEAMMATE_ERROR = "teammate.error"
    """To lead from `system`: a teammate's turn kept failing and it was set idle."""
    TEAMMATE_SHUTDOWN = "teammate.shutdown"
    """To lead from `system`: a teammate was shut down."""
    TEAM_BUDGET_ADDED = "team.budget_added"
    """To lead from `system`: `teamctl team budget` raised the team's budget; teammates with
    unread mail or ready tasks take turns again."""
    TEAM_BUDGET_EXCEEDED = "team.budget_exceeded"
    """To lead from `system`: the model call that spent the team's budget was charged
    (TeamStore.charge); sent once."""


SYSTEM_NAMESPACES = tuple(dict.fromkeys(t.value.partition(".")[0] + "." for t in SystemType))
"""The prefixes of the system types ("task.", "run.", ...): reserved for the runtime as a whole,
so a member cannot pose as a notice of a later version either."""


class PeerType(StrEnum):
    """The default types of the messages members send; they may name others (e.g. peer.ask)."""

    MESSAGE = "peer.message"
    BROADCAST = "peer.broadcast"


class ProtocolType(StrEnum):
    """The teammates' protocol messages: each carries a request_id (its durable record) and a
    response carries `approve`; only the protocol paths publish them, never send_message."""

    SHUTDOWN_REQUEST = "shutdown_request"
    """From lead to a teammate (request_open.lua)."""
    SHUTDOWN_RESPONSE = "shutdown_response"
    """From the teammate to lead (request_resolve.lua)."""
    PLAN_APPROVAL_REQUEST = "plan_approval_request"
    """From a teammate in plan mode to lead (plan_submit.lua)."""
    PLAN_APPROVAL_RESPONSE = "plan_approval_response"
    """From lead to the teammate (request_resolve.lua)."""


class EnvelopeKind(StrEnum):
    """The variants of Envelope, told apart by the message type (`envelope_kind`)."""

    SYSTEM = "system"
    PEER = "peer"
    PROTOCOL = "protocol"


class EnvelopeBase(BaseModel):
    """The fields every message on a bus has (stream entries store None as ''); dumped as
    `from`, the name the CLI's JSON and the stream use, and read under either name."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: str = ""
    from_: str = Field(alias="from")
    to: HashText = None
    type: str
    task_id: HashText = None
    content: str = ""
    created_at: int = 0
    traceparent: HashText = Field(None, exclude=True)
    """The sender's span (W3C traceparent) when it was traced; a receiver's span links to it.
    Not shown with the message."""


class SystemNotice(EnvelopeBase):
    """A notice the runtime published (from `system`, or from a member announcing its result)."""

    type: SystemType


class PeerMessage(EnvelopeBase):
    """A message a member (or the lead) sent: peer.message, peer.broadcast or its own type."""


class ProtocolMessage(EnvelopeBase):
    """A protocol request or response between the lead and a teammate, tied to its record."""

    type: ProtocolType
    request_id: str
    approve: Annotated[bool | None, BLANK_IS_NONE] = None
    """On a response: whether the request was approved (None on a request)."""


_KIND_OF_TYPE: dict[str, EnvelopeKind] = {
    **dict.fromkeys(SystemType, EnvelopeKind.SYSTEM),
    **dict.fromkeys(ProtocolType, EnvelopeKind.PROTOCOL),
}
"""Types with a variant of their own; every other type is a peer message."""


def envelope_kind(message: Any) -> str:
    """The Envelope variant of a message (a dict from a stream, or a model)."""
    type_ = message.get("type") if isinstance(message, dict) else getattr(message, "type", None)
    if not isinstance(type_, str):
        return EnvelopeKind.PEER  # whose validation then says what is wrong with the type
    return _KIND_OF_TYPE.get(type_, EnvelopeKind.PEER)


Envelope = Annotated[
    Annotated[SystemNotice, Tag(EnvelopeKind.SYSTEM)]
    | Annotated[PeerMessage, Tag(EnvelopeKind.PEER)]
    | Annotated[ProtocolMessage, Tag(EnvelopeKind.PROTOCOL)],
    Discriminator(envelope_kind),
]
"""One message on a bus: a union discriminated on `type`; parse with ENVELOPES."""


ENVELOPES: TypeAdapter[Envelope] = TypeAdapter(Envelope)
"""Parses and validates messages (stream entries, dicts) into the right Envelope variant."""
