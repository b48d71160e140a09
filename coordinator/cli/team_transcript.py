"""`teamctl team transcript`: a teammate's (or the lead's) conversation turn by turn, safe for a
terminal. A header line per turn, then indented under it what the turn was given, its model's
replies, its tool calls and their results: model-written text, cut and made printable as
`teamctl transcript` makes a run task's, its further lines indented under the first."""

from __future__ import annotations

import json
import time

import click
from teamctl.coordinator.cli.transcript_view import LINE_CHARS
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.transcripts import (
    EntryKind,
    Transcript,
    TranscriptEntry,
    TranscriptTurn,
    load_transcript,
)
from teamctl.shared.text import duration_text, flat, one_line, printable, shorten

ENTRY_INDENT = "  "
MORE_INDENT = "    "
"""An entry's lines sit under its turn's header; an entry's further lines under its first."""


def print_transcript(store: TeamStore, member: str, *, turn: int | None, as_json: bool) -> None:
    """Print the member's transcript (one turn with `turn`), as lines or as one JSON object."""
    transcript = load_transcript(store, member)
    if turn is not None:
        transcript = transcript.only(turn)
    if as_json:  # ASCII only: what a model wrote reaches the terminal escaped
        click.echo(json.dumps(transcript.model_dump(mode="json"), indent=2))
        return
    if not transcript.turns:
        click.echo(f"{member}: no conversation in memory yet")
    for line in transcript_lines(transcript):
        click.echo(line)


def transcript_lines(transcript: Transcript) -> list[str]:
    """Every turn's header line, each followed by its entries' lines."""
    lines = []
    for turn in transcript.turns:
        lines.append(turn_header(turn))
        for entry in turn.entries:
            lines += entry_lines(entry)
    return lines


def turn_header(turn: TranscriptTurn) -> str:
    """`turn N  <local start time>  <how it ended>`, or the header of memory's messages from
    before any recorded turn."""
    if turn.turn is None:
        return "before the recorded turns"
    started = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(turn.started_ms / 1000))
        if turn.started_ms
        else "-"
    )
    if turn.ended is not None:
        took = (
            f" after {duration_text(turn.ended_ms - turn.started_ms)}"
            if turn.ended_ms and turn.started_ms
            else ""
        )
        how = f"ended {one_line(turn.ended, LINE_CHARS)}{took}"
    else:
        how = "running" if turn.running else "no end recorded"
    cut = "  (its first messages left memory)" if turn.cut else ""
    return f"turn {turn.turn}  {started}  {how}{cut}"


def entry_lines(entry: TranscriptEntry) -> list[str]:
    """One entry as `label: text`, its text's further lines indented under it."""
    name = flat(entry.name or "?")
    if entry.kind is EntryKind.CALL:  # as `teamctl transcript` shows a call: name(arguments)
        return [f"{ENTRY_INDENT}call {one_line(f'{name}({entry.text})', LINE_CHARS)}"]
    label = {
        EntryKind.USER: "user",
        EntryKind.REPLY: "reply",
        EntryKind.RESULT: f"result {name}",
        EntryKind.INBOX: f"inbox from {flat(entry.sender or '?')} ({flat(entry.type or '?')})",
    }[entry.kind]
    first, *more = text_lines(entry.text) or [""]
    return [f"{ENTRY_INDENT}{label}: {first}".rstrip()] + [
        f"{ENTRY_INDENT}{MORE_INDENT}{line}" for line in more
    ]


def text_lines(text: str) -> list[str]:
    """Model-written text cut to LINE_CHARS characters and made printable, as its non-blank
    lines (tabs expanded: nothing a terminal acts on remains)."""
    cut = shorten(printable(text), LINE_CHARS)
    return [line.expandtabs(4).rstrip() for line in cut.split("\n") if line.strip()]
