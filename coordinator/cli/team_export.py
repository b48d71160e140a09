"""`teamctl team export DIR`: a team in the file layout of the teammate designs it follows
(config.json, one inbox JSONL per recipient, one JSON file per request), for people and tools
that read those files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from teamctl.coordinator.cli.export import write_files
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import Envelope, ProtocolMessage
from teamctl.shared.teams.team_store import TeamStore

UNREAD_ALL = 1 << 30
"""Peek limit for an export: every unread message at once."""


def inbox_line(message: Envelope) -> dict[str, Any]:
    """One inbox line: type, from, content, timestamp (epoch seconds), protocol fields on top."""
    line: dict[str, Any] = {
        "type": str(message.type),
        "from": message.from_,
        "content": message.content,
        "timestamp": message.created_at / 1000,
    }
    if isinstance(message, ProtocolMessage):
        line["request_id"] = message.request_id
        if message.approve is not None:
            line["approve"] = message.approve
    return line


def export_team(
    store: TeamStore, root: Path, *, everything: bool, force: bool = False
) -> list[Path]:
    """Write the team's files under `root` (unread mail, or all mail kept; refusing to
    overwrite a file unless `force`); returns the paths."""
    teammates = store.teammates()
    config = {
        "team_name": store.team,
        "members": [{"name": m.name, "role": m.role, "status": m.status.value} for m in teammates],
    }
    files = [(root / "config.json", json.dumps(config, indent=2) + "\n")]
    for member in [*(m.name for m in teammates), LEAD]:
        messages = (
            store.messages.kept(member)
            if everything
            else store.messages.peek(member, UNREAD_ALL)[1]
        )
        lines = "".join(json.dumps(inbox_line(m), ensure_ascii=False) + "\n" for m in messages)
        files.append((root / "inbox" / f"{member}.jsonl", lines))
    for request in store.requests.all():
        files.append(
            (
                root / "requests" / f"{request.id}.json",
                request.model_dump_json(by_alias=True, indent=2) + "\n",
            )
        )
    return write_files(files, force=force)
