"""Bounded team tool results: list_tasks pages a board of 3,000 tasks under
tool_result_max_chars with the right totals, get_task shows one task (its result capped),
read_inbox answers at most inbox_batch_messages within tool_result_max_chars saying how many
remain, and a turn's `<inbox>` blocks carry at most a batch each. Real Redis; the teammate and
lead toolboxes are driven as a turn drives them; the last test runs real turns on the session's
workers with the scripted model server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from teamctl.coordinator.teams.lead import LeadAgent
from teamctl.coordinator.teams.lead_tools import LeadTools
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import SystemType
from teamctl.shared.lease import LeadLease
from teamctl.shared.teams.inbox import unread_batch
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.worker.teams.teammate_tools import TeammateTools

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import HeldFirstCall, inbox_lines, spawn
from tests.support.waiting import wait_until

NOBODY = "nobody"
TASKS = 3000
BIG_RESULTS = 30
BIG_CHARS = 50_000
CAP = TeamOptions().tool_result_max_chars
_INBOX = re.compile(r"<inbox>\n(.*?)\n</inbox>", re.S)


def add_tasks(store: TeamStore, count: int) -> None:
    """Add task_1..task_<count> through the board's own add script (no wake-ups: nobody idles)."""
    keys = store.keys
    for number in range(1, count + 1):
        task_id = f"task_{number}"
        verdict, _ = store.scripts["team_task_add"](
            keys=[
                keys.task_seq,
                keys.order,
                keys.ready,
                keys.counts,
                keys.events,
                keys.task(task_id),
                keys.ready_open,
            ],
            args=[
                str(number - 1),
                task_id,
                f"job {number}",
                "",
                "",
                "",
                store.options.max_task_releases,
            ],
        )
        assert verdict == "ok"


@pytest.fixture
def board(conn: redis.Redis, team: str) -> tuple[str, str]:
    """A team whose board has TASKS tasks: the first BIG_RESULTS completed by alice with
    BIG_CHARS-character results, the next one with a short result, the rest ready; the lead's
    inbox holds their task.result notices. Returns the team and alice's turn token."""
    store = TeamStore(conn, team)
    store.create(TeamOptions())
    store.spawn("alice", role="dev", prompt="start", model="m", api_base=None, queue=NOBODY)
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    add_tasks(store, TASKS)
    tasks = TeamTasks(store)
    for number in range(1, BIG_RESULTS + 2):
        tasks.claim("alice", token, f"task_{number}")
        result = "short result" if number == BIG_RESULTS + 1 else f"{number}:" + "r" * BIG_CHARS
        tasks.complete("alice", token, f"task_{number}", result)
    return team, token


def toolboxes(store: TeamStore, tmp_path: Path) -> dict[str, Toolbox]:
    """The teammate's toolbox (alice's) and the lead's, on the same team."""
    lead = Toolbox()
    LeadTools(store, "m", None, tmp_path).add_to(lead)
    return {"alice": TeammateTools(store, "alice").toolbox(), "lead": lead}


def called(box: Toolbox, tool: str, **args: Any) -> tuple[dict[str, Any], int]:
    """The tool's answer, parsed, and its length in characters."""
    text = box.call(tool, json.dumps(args))
    assert not text.startswith("TOOL_ERROR"), text
    return json.loads(text), len(text)


def error(box: Toolbox, tool: str, **args: Any) -> str:
    text = box.call(tool, json.dumps(args))
    assert text.startswith("TOOL_ERROR: "), text
    return str(json.loads(text.removeprefix("TOOL_ERROR: "))["error"])


@pytest.mark.parametrize("who", ["alice", "lead"])
def test_list_tasks_pages_3000_tasks_under_the_cap_with_the_right_totals(
    conn: redis.Redis, board: tuple[str, str], tmp_path: Path, who: str
) -> None:
    store = TeamStore(conn, board[0])
    box = toolboxes(store, tmp_path)[who]
    first, size = called(box, "list_tasks")
    assert size <= CAP
    returned = first["returned"]
    assert 1 <= returned <= 50 and len(first["tasks"]) == returned
    assert (first["total"], first["offset"], first["remaining"], first["next_offset"]) == (
        TASKS,
        0,
        TASKS - returned,
        returned,
    )
    assert [t["id"] for t in first["tasks"]] == [f"task_{n}" for n in range(1, returned + 1)]
    assert first["tasks"][0]["result"] == "1:" + "r" * 198 + "..."
    assert "get_task" in first["note"]
    # The next page starts where this one stopped; the largest page still fits.
    after, size = called(box, "list_tasks", offset=first["next_offset"], limit=200)
    assert size <= CAP and after["tasks"][0]["id"] == f"task_{returned + 1}"
    assert after["remaining"] == TASKS - returned - after["returned"]
    done, size = called(box, "list_tasks", status="completed", offset=25, limit=10)
    assert [t["id"] for t in done["tasks"]] == [f"task_{n}" for n in range(26, 32)]
    assert (done["total"], done["remaining"], done["next_offset"]) == (BIG_RESULTS + 1, 0, None)
    assert done["tasks"][-1]["result"] == "short result"
    ready, _ = called(box, "list_tasks", status="Ready", offset=100, limit=10)
    assert [t["id"] for t in ready["tasks"]] == [f"task_{n}" for n in range(132, 142)]
    assert (ready["status"], ready["total"], ready["remaining"], ready["next_offset"]) == (
        "ready",
        TASKS - BIG_RESULTS - 1,
        TASKS - BIG_RESULTS - 1 - 110,
        110,
    )
    tail, _ = called(box, "list_tasks", offset=TASKS - 2)
    assert [t["id"] for t in tail["tasks"]] == [f"task_{TASKS - 1}", f"task_{TASKS}"]
    assert (tail["remaining"], tail["next_offset"]) == (0, None)
    nothing, _ = called(box, "list_tasks", status="pending")
    assert (nothing["total"], nothing["tasks"], nothing["remaining"]) == (0, [], 0)
    assert "use one of pending, ready, in_progress" in error(box, "list_tasks", status="bogus")
    assert "limit" in error(box, "list_tasks", limit=201)
    assert "offset" in error(box, "list_tasks", offset=-1)


@pytest.mark.parametrize("who", ["alice", "lead"])
def test_get_task_shows_one_task_whole_and_caps_a_long_result(
    conn: redis.Redis, board: tuple[str, str], tmp_path: Path, who: str
) -> None:
    store = TeamStore(conn, board[0])
    box = toolboxes(store, tmp_path)[who]
    short, _ = called(box, "get_task", task_id="Task 31")
    assert short == {
        "action": "get_task",
        "ok": True,
        "task": {
            "id": "task_31",
            "status": "completed",
            "subject": "job 31",
            "description": "",
            "role": None,
            "assignee": None,
            "owner": None,
            "after": [],
            "result": "short result",
            "released_reason": None,
            "releases": 0,
            "error": None,
        },
    }
    long, size = called(box, "get_task", task_id="task_7")
    assert size <= CAP
    result = long["task"]["result"]
    assert result.startswith("7:rrrr") and result.endswith(
        f"[truncated: the result has {BIG_CHARS + 2} characters; the first "
        f"{len(result.split(chr(10))[0])} are shown]"
    )
    assert len(result.split("\n")[0]) > CAP // 2
    assert "unknown task task_9999" in error(box, "get_task", task_id="task_9999")


def test_read_inbox_answers_a_batch_and_says_how_many_remain(conn: redis.Redis, team: str) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions())
    store.spawn("bob", role="dev", prompt="start", model="m", api_base=None, queue=NOBODY)
    verdict, token = store.turns.begin_turn("bob", "test:1")
    assert verdict == "ok"
    for index in range(200):
        store.messages.send(LEAD, "bob", f"note {index}")
    box = TeammateTools(store, "bob").toolbox()
    answer, size = called(box, "read_inbox")
    assert size <= CAP
    assert [m["content"] for m in answer["messages"]] == [f"note {i}" for i in range(50)]
    assert answer["remaining"] == 150 and answer["note"].startswith("150 more unread")
    assert called(box, "read_inbox")[0] == answer  # a peek: nothing was marked read
    # A step commits what it was given: the next batch follows, and the last says none remain.
    for start in (0, 50, 100, 150):
        batch = unread_batch(store, "bob")
        assert [line["content"] for line in batch.lines] == [
            f"note {i}" for i in range(start, start + 50)
        ]
        assert batch.remaining == 150 - start
        assert store.turns.checkpoint("bob", token, batch.offset, [])
    final, _ = called(box, "read_inbox")
    assert (final["messages"], final["remaining"]) == ([], 0) and "note" not in final


def test_read_inbox_keeps_within_tool_result_max_chars(
    conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(tool_result_max_chars=5000))
    store.spawn("bob", role="dev", prompt="start", model="m", api_base=None, queue=NOBODY)
    verdict, token = store.turns.begin_turn("bob", "test:1")
    assert verdict == "ok"
    store.messages.send(LEAD, "bob", "x" * 60_000)
    for index in range(9):
        store.messages.send(LEAD, "bob", f"{index}:" + "y" * 2000)
    box = TeammateTools(store, "bob").toolbox()
    answer, size = called(box, "read_inbox")
    assert size <= 5000 and answer["remaining"] == 9
    [cut] = answer["messages"]
    assert (
        cut["content"].startswith("xxxx")
        and "[truncated: the message has 60000 characters" in cut["content"]
    )
    batch = unread_batch(store, "bob")
    assert store.turns.checkpoint("bob", token, batch.offset, [])
    answer, size = called(box, "read_inbox")
    assert size <= 5000
    assert [m["content"][:2] for m in answer["messages"]] == ["0:", "1:"]
    assert answer["remaining"] == 7
    # The lead's inbox is bounded the same way (task results, protocol answers, notices).
    lead = Toolbox()
    LeadTools(store, "m", None, tmp_path).add_to(lead)
    for index in range(60):
        store.messages.send("bob", LEAD, f"to lead {index}")
    answer, size = called(lead, "read_inbox")
    assert size <= 5000 and len(answer["messages"]) == 50 and answer["remaining"] == 10


def test_a_turn_injects_its_inbox_in_batches(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    held = HeldFirstCall("first", "ok")
    model = llm.script(f"bob-{team}", handler=held)
    store = TeamStore(wconn, team)
    store.create(TeamOptions(inbox_batch_messages=20))
    assert spawn(workers, team, "bob", model, llm.api_base).exit_code == 0
    assert held.entered.wait(30)
    for index in range(100):
        store.messages.send(LEAD, "bob", f"m{index}")
    held.release.set()
    wait_until(
        lambda: (
            store.get("bob").status is TeammateStatus.IDLE and not store.messages.peek("bob")[1]
        ),
        60,
        message="bob idle with his inbox read",
    )
    memory = store.turns.memory("bob")
    blocks = [m for m in memory if str(m.get("content")).startswith("<inbox>")]
    assert len(blocks) == 5
    assert all(len(b["content"].splitlines()) == 22 for b in blocks)  # tags + 20 messages
    assert [line["content"] for line in inbox_lines(memory)] == [f"m{i}" for i in range(100)]
    assert len(store.messages.notices(SystemType.TEAMMATE_IDLE)) >= 1


def test_the_leads_inbox_reaches_its_model_in_batches(
    conn: redis.Redis, team: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(inbox_batch_messages=20))
    store.spawn("bob", role="dev", prompt="start", model="m", api_base=None, queue=NOBODY)
    for index in range(50):
        store.messages.send("bob", LEAD, f"m{index}")
    look = ToolCalls([("list_teammates", {})])
    model = llm.script(f"lead-{team}", [look, look, "all read"])
    with LeadLease(conn, store.keys, ttl_s=30) as lease:
        agent = LeadAgent(
            store, lease, LitellmClient(provider_keys=()), model, llm.api_base, tmp_path
        )
        assert agent.turn("Read your mail.") == "all read"
    sent = llm.requests[f"lead-{team}"]
    assert [
        len(_INBOX.findall(body["messages"][-1]["content"])[0].splitlines()) for body in sent
    ] == [20, 20, 10]
    assert not store.messages.peek(LEAD)[1]
