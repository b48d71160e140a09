"""`teamctl export RUN DIR`: a run in AI4J's file layout (state/<team>.json, mailbox/<team>.jsonl),
and the files its members left in their workspace (workspace/...).

The field names are AI4J's (camelCase, epoch milliseconds, upper-case statuses), so tools written
for `FileAgentTeamStateStore` and `FileAgentTeamMessageBus` can read the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import Envelope
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_files import RunFiles
from teamctl.shared.task_records import TaskState
from teamctl.shared.workspace.mirror import syncable


class Ai4jTask(BaseModel):
    """AgentTeamTask."""

    id: str
    memberId: str | None
    task: str
    context: str | None
    dependsOn: list[str]


class Ai4jTaskState(BaseModel):
    """AgentTeamTaskState."""

    taskId: str
    task: Ai4jTask
    status: str
    claimedBy: str | None
    startTime: int
    endTime: int
    durationMillis: int
    lastHeartbeatTime: int
    phase: str
    detail: str | None
    percent: int
    updatedAtEpochMs: int
    heartbeatCount: int
    output: str | None
    error: str | None


class Ai4jMessage(BaseModel):
    """AgentTeamMessage (one line of the mailbox file)."""

    id: str
    fromMemberId: str
    toMemberId: str | None
    type: str
    taskId: str | None
    content: str
    createdAt: int


class Ai4jMember(BaseModel):
    """AgentTeamMemberSnapshot."""

    id: str
    name: str | None
    description: str | None


class Ai4jState(BaseModel):
    """AgentTeamState, as FileAgentTeamStateStore writes it."""

    teamId: str
    objective: str
    members: list[Ai4jMember]
    taskStates: list[Ai4jTaskState]
    messages: list[Ai4jMessage]
    lastOutput: str | None
    lastRounds: int
    lastRunStartedAt: int
    lastRunCompletedAt: int
    updatedAt: int = Field(default_factory=now_ms)
    runActive: bool


def _task_state(s: TaskState) -> Ai4jTaskState:
    task = Ai4jTask(
        id=s.task_id, memberId=s.member_id, task=s.task, context=s.context, dependsOn=s.depends_on
    )
    return Ai4jTaskState(
        taskId=s.task_id,
        task=task,
        status=s.status.value.upper(),
        claimedBy=s.claimed_by,
        startTime=s.start_ms,
        endTime=s.end_ms,
        durationMillis=s.duration_ms,
        lastHeartbeatTime=s.last_heartbeat_ms,
        phase=s.phase,
        detail=s.detail,
        percent=s.percent,
        updatedAtEpochMs=s.updated_ms,
        heartbeatCount=s.heartbeat_count,
        output=s.output,
        error=s.error,
    )


def _message(m: Envelope) -> Ai4jMessage:
    return Ai4jMessage(
        id=m.id,
        fromMemberId=m.from_,
        toMemberId=m.to,
        type=m.type,
        taskId=m.task_id,
        content=m.content,
        createdAt=m.created_at,
    )


def export_run(run: RunHandle, root: Path, *, force: bool = False) -> list[Path]:
    """Write the two files under `root` (refusing to overwrite either unless `force`); returns
    their paths."""
    spec, state = run.spec, run.store.state()
    messages = [_message(m) for m in run.bus.messages()]
    snapshot = Ai4jState(
        teamId=spec.team_id,
        objective=spec.objective,
        members=[
            Ai4jMember(id=m.id, name=m.display_name, description=m.description)
            for m in spec.members
        ],
        taskStates=[_task_state(s) for s in run.board.snapshot()],
        messages=messages,
        lastOutput=state.output,
        lastRounds=state.rounds,
        lastRunStartedAt=state.started_ms,
        lastRunCompletedAt=state.ended_ms,
        runActive=not state.finished,
    )
    files = RunFiles(run.conn, spec)
    # Only paths that stay under workspace/ (files.everything() yields no other; checked again
    # here because these paths come from Redis and name files to write).
    workspace = (
        [(root / "workspace" / path, data) for path, data in files.everything() if syncable(path)]
        if files.here
        else []
    )
    return write_files(
        [
            (root / "state" / f"{spec.team_id}.json", snapshot.model_dump_json(indent=2)),
            (
                root / "mailbox" / f"{spec.team_id}.jsonl",
                "".join(m.model_dump_json() + "\n" for m in messages),
            ),
            *workspace,
        ],
        force=force,
    )


def write_files(files: Sequence[tuple[Path, str | bytes]], *, force: bool) -> list[Path]:
    """Write each (path, text or bytes), creating directories; unless `force`, a file that
    exists is a ConfigError naming the first one, raised before anything is written."""
    if not force:
        existing = next((path for path, _ in files if path.exists()), None)
        if existing is not None:
            raise ConfigError(f"{existing} exists; pass --force to overwrite the export's files")
    for path, text in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    return [path for path, _ in files]
