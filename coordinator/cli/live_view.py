"""Talking to a live run from outside: `teamctl send`, `teamctl tasks --follow`, `teamctl events`.

The followers read the run's `events` stream (task state changes, written by the board scripts)
and, for `events`, its `bus` stream too, in one XREAD BLOCK, through the tailing loop of
`messages --follow` (messages_view.follow), until the run ends.
"""

from __future__ import annotations

import click
from teamctl.coordinator.cli.messages_view import follow, formatted, sent_line
from teamctl.coordinator.cli.named_run import existing_run
from teamctl.coordinator.runs.run_control import send_message
from teamctl.coordinator.runs.run_follow import (
    MergedTail,
    Stream,
    TaskChanges,
    last_entry_id,
    run_ended,
    run_events,
    task_event,
)
from teamctl.shared.clock import now_ms
from teamctl.shared.runs.output import MessageEvent, TaskChange
from teamctl.shared.task_records import TaskEvent, TaskState
from teamctl.shared.text import clock_text, flat

# --- send ---------------------------------------------------------------------------------------


def send_command(redis_url: str, run_id: str, to: str, text: str) -> None:
    """`teamctl send`: a person's message, as `lead`, to one member of a live run or to all."""
    message = send_message(existing_run(redis_url, run_id), to, text)
    click.echo(sent_line((message.to or to) if message else to))


# --- following ----------------------------------------------------------------------------------


def as_is(state: TaskState) -> TaskChange:
    """A task as the board stands now (a line printed before following)."""
    return TaskChange(
        task_id=state.task_id,
        status=state.status,
        member_id=state.claimed_by or state.member_id,
        attempts=state.attempts,
        at_ms=state.updated_ms,
    )


def change_line(change: TaskChange, as_json: bool) -> str:
    if as_json:
        return change.model_dump_json()
    return (
        f"{flat(change.task_id):24} {change.status.value:12} "
        f"{flat(change.member_id) or '-':16} attempts={change.attempts}"
    )


def follow_tasks_command(redis_url: str, run_id: str | None, as_json: bool) -> None:
    """`teamctl tasks --follow`: the board as it stands, then every task change until the run
    ends. The stream position is taken before the board is read, so a change made meanwhile is
    printed (perhaps twice), never missed."""
    run = existing_run(redis_url, run_id)
    after_id = last_entry_id(run.conn, run.keys.events)
    for state in run.board.snapshot():
        click.echo(change_line(as_is(state), as_json))
    changes = TaskChanges(run.board)

    def emit(event: TaskEvent) -> None:
        for change in changes.of(event):
            click.echo(change_line(change, as_json))

    tail = MergedTail(run.conn, [Stream(run.keys.events, after_id, task_event)])
    follow(tail, emit, lambda: run_ended(run.store))


def events_command(redis_url: str, run_id: str | None, as_json: bool) -> None:
    """`teamctl events`: task changes and bus messages in one order, from the run's start until
    it ends."""
    try:
        for event in run_events(existing_run(redis_url, run_id)):
            if isinstance(event, MessageEvent):
                click.echo(
                    event.model_dump_json(by_alias=True)
                    if as_json
                    else formatted(event.message, False)
                )
            else:
                click.echo(
                    event.model_dump_json()
                    if as_json
                    else f"{clock_text(event.at_ms, now_ms())} [task {event.status.value}] "
                    f"{flat(event.task_id)} {flat(event.member_id) or '-'} "
                    f"attempts={event.attempts}"
                )
    except KeyboardInterrupt:
        return
