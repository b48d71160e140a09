"""Functions a team file names as member tools in the tests (no tests here)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys

from teamctl.tools import ToolContext, tool

PROBE: dict[str, Any] = {}
"""beat_probe's Redis connection (`conn`, set by the test) and what it saw."""


class Ticket(BaseModel):
    """A ticket as fetch_ticket returns it."""

    ticket_id: int
    title: str
    labels: list[str]


def search_docs(
    query: Annotated[str, Field(description="What to look for.")],
    limit: Annotated[int, Field(ge=1, le=10)] = 3,
    mode: Literal["exact", "fuzzy"] = "exact",
) -> dict[str, object]:
    """Search the documentation for a query; returns up to `limit` hits."""
    return {"query": query, "hits": [f"{mode}:{query}:{n}" for n in range(limit)]}


def fetch_ticket(ticket_id: int) -> Ticket:
    """Fetch one ticket by its number."""
    return Ticket(ticket_id=ticket_id, title=f"Ticket {ticket_id}", labels=["bug", "ü"])


def explode(reason: str) -> str:
    """Always fails, saying why."""
    raise RuntimeError(f"exploded: {reason}")


def explode_big(chars: int) -> str:
    """Always fails, with an error text of `chars` characters."""
    raise RuntimeError("e" * chars)


async def slow_double(value: float) -> float:
    """Double a number, asynchronously."""
    await asyncio.sleep(0)
    return value * 2


def where_am_i(note: str, ctx: ToolContext) -> dict[str, object]:
    """Report the call's context, refreshing the task's claim once."""
    return {
        "note": note,
        "run": ctx.run_id,
        "task": ctx.task_id,
        "member": ctx.member_id,
        "team": ctx.team_id,
        "workspace": str(ctx.workspace),
        "beat": ctx.heartbeat(),
    }


def beat_probe(ctx: ToolContext) -> str:
    """Watch the claim's TTL run down and heartbeat; then let the claim expire, reclaim it as
    the coordinator does, and heartbeat again. What it saw goes to PROBE (the attempt, having
    lost its claim, makes no further model call)."""
    conn = PROBE["conn"]
    keys = RunKeys(ctx.run_id or "")
    key = keys.heartbeat(ctx.task_id or "")
    PROBE["fresh"] = fresh = conn.pttl(key)
    PROBE["ran_down"] = _until(lambda: (left := conn.pttl(key)) < fresh - 500 and left)
    PROBE["beat"] = ctx.heartbeat()
    PROBE["after_beat"] = conn.pttl(key)
    conn.pexpire(key, 1)  # the TTL runs out now, as it would after heartbeat_ttl_s
    _until(lambda: not conn.exists(key))
    PROBE["reclaimed"] = TaskBoard(conn, keys).reclaim_expired(3)
    PROBE["beat_after_reclaim"] = ctx.heartbeat()
    return "probed"


def _until(predicate: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """`predicate`'s first truthy value, polled until a deadline (then an error)."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise TimeoutError("beat_probe: the condition never held")
        time.sleep(0.01)
    return value


def long_text(chars: int) -> str:
    """A text of `chars` characters."""
    return "x" * chars


def team_search(query: str) -> str:
    """Named like a team tool: refused."""
    return query


def renamed(query: str) -> str:
    """Its __name__ is changed to a workspace tool's below: the coordinator's check sees it."""
    return query


renamed.__name__ = "read_file"


def list_teammates() -> str:
    """Named like a teammate's own tool: `team spawn` refuses it."""
    return "mine"


def idle() -> str:
    """Named like a teammate's own tool too: the lead's spawn_teammate refuses it."""
    return "mine"


def file_ticket(ticket: Ticket, notify: bool = False) -> str:
    """File a ticket.

    Nothing is sent anywhere: the tests read the answer.

    Args:
        ticket: The ticket to file,
            with its labels.
        notify (bool): Whether to tell the team.

    Returns:
        A confirmation.
    """
    return f"filed {ticket.ticket_id} ({len(ticket.labels)} labels), notify={notify}"


HANG: dict[str, Any] = {}
"""What the hanging tools saw: `release` (a threading.Event the test sets to end them),
`beats` (heartbeat answers), `cancelled`."""


def hang_and_beat(ctx: ToolContext) -> str:
    """Hang, heartbeating, until the heartbeat answers False or the test releases it."""
    beats = HANG.setdefault("beats", [])
    while not HANG["release"].is_set():
        beats.append(ctx.heartbeat())
        if not beats[-1]:
            break
        time.sleep(0.02)
    return "released"


async def hang_async() -> str:
    """Hang on the event loop until cancelled."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        HANG["cancelled"] = True
        raise
    return "woke"


def hang_for(seconds: float) -> str:
    """Sleep for `seconds`, or until the test releases it (a worker's job ends first and takes
    the sleep with it)."""
    release = HANG.get("release")
    if release is None:
        time.sleep(seconds)
    else:
        release.wait(seconds)
    return "slept"


def environment_hidden() -> bool:
    """Whether the process running this tool hides its /proc files from its user's programs."""
    from teamctl.worker.process_privacy import environment_private

    return environment_private()


def count_step(path: str, step: int) -> str:
    """Append `step` to the file at `path`: tests count how often a tool really ran."""
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{step}\n")
    return f"step {step} done"


def call_key(ctx: ToolContext) -> str:
    """The idempotency key of the call this serves."""
    return ctx.idempotency_key


BLOCK_S = 300.0
"""How long mark_and_block's first call waits for a file no test writes (its worker is killed
meanwhile): bounded, so a failed test leaves no endless thread."""


def mark_and_block(path: str, ctx: ToolContext) -> str:
    """Append the call's idempotency key to the file at `path`; the first call then blocks (a
    test kills its worker mid-call). Undeclared: not safe to repeat."""
    return _mark_then_block(Path(path), ctx.idempotency_key)


@tool(idempotent=True)
def mark_and_block_idempotent(path: str, ctx: ToolContext) -> str:
    """As mark_and_block, declared idempotent: a call a crash left in doubt runs again."""
    return _mark_then_block(Path(path), ctx.idempotency_key)


def _mark_then_block(path: Path, key: str) -> str:
    with path.open("a", encoding="utf-8") as marks:
        marks.write(f"{key}\n")
    runs = len(path.read_text(encoding="utf-8").split())
    if runs == 1:
        never = path.with_name(path.name + ".never")
        deadline = time.monotonic() + BLOCK_S
        while not never.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return f"marked {runs} time(s)"
