"""A persistent team's budget (`max_tokens`, `max_cost_usd`): every model call of its teammates
and its lead reserves its worst case first and is charged atomically; a call the budget cannot
cover is not made and ends its turn `budget`, the lead is told once, mail is delivered but
wakes no one, no turn and no lead call starts, and `teamctl teams` shows the usage. Real
Redis, the session's real workers on `members`, the scripted model (every reply reports 11
prompt and 7 completion tokens)."""

from __future__ import annotations

import json
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis
from rq import Queue
from teamctl.shared.agent.replies import Usage
from teamctl.shared.budget import Charge
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import SystemType
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import IdleReason, TeammateStatus
from teamctl.worker.teams.turn import execute_turn

from tests.support.llm import ScriptedLLM
from tests.support.teams import cli, lead_args, spawn, typed
from tests.support.waiting import wait_until
from tests.support.workers import workers_idle

CALL_TOKENS = 18
"""What each scripted reply reports: 11 prompt and 7 completion tokens."""
SPENT_40 = "budget exceeded: 40 tokens used, max_tokens is 30"
CHARGERS = 20
"""Model calls charged at once, each of 10 tokens, against max_tokens = 50."""


def base(url: str, team: str) -> tuple[str, ...]:
    return ("-t", team, "--redis-url", url)


def settled(store: TeamStore, name: str, url: str) -> bool:
    return store.get(name).status is TeammateStatus.IDLE and workers_idle(url)


def test_a_call_the_budget_cannot_cover_is_not_made_and_nothing_wakes_after_it(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    created = cli("team", "create", "--max-tokens", "30", *base(workers, team))
    assert created.exit_code == 0, created.output
    store = TeamStore(wconn, team)
    # Each call reserves its worst case (the prompt and 4096 output tokens for a model litellm
    # does not know): 30 tokens cover none, so no call is made at all.
    model = llm.script(f"alice-{team}", [])
    assert spawn(workers, team, "alice", model, llm.api_base).exit_code == 0
    wait_until(
        lambda: (
            settled(store, "alice", workers) and store.messages.notices(SystemType.TEAMMATE_IDLE)
        ),
        message="alice's refused turn",
    )
    spent = store.budget_exceeded()
    assert spent is not None and re.fullmatch(
        r"budget exceeded: 0 tokens used, the next call may take \d+, max_tokens is 30", spent
    )
    alice = store.get("alice")
    assert (alice.idle_reason, alice.last_error) == (IdleReason.BUDGET, spent)
    assert llm.requests[f"alice-{team}"] == []
    usage = store.usage()
    assert (usage.prompt_tokens, usage.completion_tokens) == (0, 0)
    assert usage.budget_exceeded == spent
    [told] = store.messages.notices(SystemType.TEAM_BUDGET_EXCEEDED)
    assert (told.from_, told.to) == ("system", LEAD)
    assert told.content == (
        f"{spent}: no teammate or lead starts another model call and "
        "messages wake no one until "
        f"`teamctl team budget --add-tokens 10000 -t {team}` raises it"
    )
    assert told.id in [m.id for m in store.messages.peek(LEAD)[1]]

    # Mail is delivered but wakes no one, and says why.
    again = cli("team", "send", "alice", "one more thing", *base(workers, team))
    assert again.exit_code == 0
    assert again.stdout.endswith(" to alice\n")
    assert again.stderr.count("\n") == 1 and again.stderr.startswith(
        f"teamctl: team {team}: {spent}; the message waits unread and wakes no one"
    )
    everyone = cli("team", "broadcast", "all hands", *base(workers, team))
    assert everyone.exit_code == 0 and everyone.stdout.endswith("; woke 0\n")
    assert [m.content for m in store.messages.peek("alice")[1]][-2:] == [
        "one more thing",
        "all hands",
    ]
    assert store.get("alice").status is TeammateStatus.IDLE
    assert Queue("members", connection=redis.Redis.from_url(workers)).count == 0
    # Nothing that would start a turn goes through; nothing was written.
    for what, refused in (
        ("bob was not spawned", spawn(workers, team, "bob", model, llm.api_base)),
        (
            "no shutdown request was sent to alice",
            cli("team", "shutdown", "alice", *base(workers, team)),
        ),
    ):
        assert refused.exit_code == 1
        assert refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(f"teamctl: team {team}: {spent}; {what}")
    assert store.names() == ["alice"] and store.requests.all() == []
    assert llm.requests[f"alice-{team}"] == []
    assert len(store.messages.notices(SystemType.TEAM_BUDGET_EXCEEDED)) == 1

    [row] = [
        r
        for r in json.loads(cli("teams", "--json", "--redis-url", workers).stdout)
        if r["team"] == team
    ]
    assert {k: row[k] for k in ("tokens", "cost_usd", "max_tokens", "budget_exceeded")} == {
        "tokens": 0,
        "cost_usd": 0.0,
        "max_tokens": 30,
        "budget_exceeded": spent,
    }


def test_a_top_up_wakes_the_teammate_the_spent_budget_left_with_mail(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    # 30 tokens cover no call at its worst: alice's first turn makes none and idles.
    assert cli("team", "create", "--max-tokens", "30", *base(workers, team)).exit_code == 0
    store = TeamStore(wconn, team)
    model = llm.script(f"alice-{team}", ["on it"])
    assert spawn(workers, team, "alice", model, llm.api_base).exit_code == 0
    wait_until(
        lambda: (
            settled(store, "alice", workers) and store.get("alice").idle_reason == IdleReason.BUDGET
        ),
        message="alice's turn the budget could not cover",
    )
    spent = store.budget_exceeded()
    assert spent is not None and llm.requests[f"alice-{team}"] == []
    assert cli("team", "send", "alice", "one more thing", *base(workers, team)).exit_code == 0
    assert store.get("alice").status is TeammateStatus.IDLE  # the mail waits
    for args, says in (
        (["--add-tokens", "-3"], "--add-tokens '-3': give a whole number"),
        (["--add-usd", "2"], f"team {team} has no max_cost_usd"),
    ):
        refused = cli("team", "budget", *args, *base(workers, team))
        assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.output
        assert says in refused.stderr
    shown = cli("team", "budget", *base(workers, team))
    assert shown.stdout.splitlines() == [
        "tokens: 0 used of 30 (max_tokens 30 + 0 added)",
        f"spent: {spent}",
    ]

    raised = cli("team", "budget", "--add-tokens", "10000", *base(workers, team))

    assert raised.exit_code == 0, raised.output
    assert raised.stdout.splitlines() == [
        f"budget of team {team} raised; woke 1 teammate",
        "tokens: 0 used of 10030 (max_tokens 30 + 10000 added)",
        "the budget lasts",
    ]
    wait_until(
        lambda: settled(store, "alice", workers) and not store.messages.peek("alice")[1],
        message="alice's turn on the mail that waited",
    )
    assert (store.get("alice").idle_reason, store.budget_exceeded()) == (IdleReason.DONE, None)
    assert len(llm.requests[f"alice-{team}"]) == 1
    assert store.usage().prompt_tokens > 0
    assert [m.type for m in store.messages.notices(SystemType.TEAM_BUDGET_ADDED)] == [
        SystemType.TEAM_BUDGET_ADDED
    ]


def test_a_turn_queued_before_the_budget_was_spent_ends_budget_without_a_model_call(
    redis_url: str, conn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    assert cli("team", "create", "--max-cost-usd", "0.5", *base(redis_url, team)).exit_code == 0
    store = TeamStore(conn, team)
    model = llm.script(f"idle-{team}", [])  # any call fails the test
    # Nobody serves this queue: the first turn waits there, the teammate working.
    assert spawn(redis_url, team, "alice", model, llm.api_base, "--queue", "nobody").exit_code == 0
    assert store.get("alice").status is TeammateStatus.WORKING
    # Working: its turn reads it.
    assert store.messages.send(LEAD, "alice", "are you there?")[1] is False
    charge = store.charge(Usage(prompt_tokens=5, cost_usd=0.75))
    assert charge.crossed and charge.exceeded == (
        "budget exceeded: $0.75 spent, max_cost_usd is 0.5"
    )
    assert not store.charge(Usage(prompt_tokens=5)).crossed  # counted, told once

    # Unread mail does not keep a turn going past the budget: it waits.
    assert execute_turn(conn, team, "alice") == "idle"
    assert [m.content for m in store.messages.peek("alice")[1]] == ["are you there?"]
    alice = store.get("alice")
    assert (alice.status, alice.idle_reason) == (TeammateStatus.IDLE, IdleReason.BUDGET)
    assert alice.last_error == charge.exceeded
    assert llm.requests[f"idle-{team}"] == []
    assert store.turns.memory("alice") == [{"role": "user", "content": "You are alice. Start."}]
    assert [m.content for m in store.messages.notices(SystemType.TEAM_BUDGET_EXCEEDED)] == [
        f"{charge.exceeded}: no teammate or lead starts another model call and messages wake "
        f"no one until `teamctl team budget --add-usd 1 -t {team}` raises it"
    ]
    assert store.usage().prompt_tokens == 10
    listed = cli("teams", "--redis-url", redis_url)
    assert listed.stdout == f"{team}\t1\t0\t10 tokens\t$0.7500 (max $0.5)\tspent\n"


def test_a_lead_call_the_budget_cannot_cover_is_not_made_and_the_lead_says_why(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    # 30 tokens cover no call at its worst (the prompt and 4096 output tokens).
    assert cli("team", "create", "--max-tokens", "30", *base(workers, team)).exit_code == 0
    store = TeamStore(wconn, team)
    lead = llm.script(f"lead-{team}", [])  # any call fails the test
    first = cli(*lead_args(workers, team, lead, llm.api_base, "-m", "Who is here?"))
    assert first.exit_code == 1
    spent = store.budget_exceeded()
    assert spent is not None and spent.startswith("budget exceeded: 0 tokens used")
    assert first.stderr.splitlines()[-1].startswith(
        f"teamctl: team {team}: {spent}; the lead makes no model call (no teammate takes "
        "another turn until `"
    )
    assert f" team budget --add-tokens 10000 -t {team} " in first.stderr  # spelled to paste
    assert [m.type for m in store.messages.peek(LEAD)[1]] == [SystemType.TEAM_BUDGET_EXCEEDED]
    # In the REPL a refused turn says why and the slash commands still answer.
    repl = typed(*lead_args(workers, team, lead, llm.api_base), lines="\n/inbox\n")
    assert repl.exit_code == 0
    assert f"teamctl: team {team}: {spent}; the lead makes no model call" in repl.stderr
    assert f"system -> lead\t{SystemType.TEAM_BUDGET_EXCEEDED}\t{spent}" in repl.stdout
    assert llm.requests[f"lead-{team}"] == []
    assert len(store.messages.notices(SystemType.TEAM_BUDGET_EXCEEDED)) == 1


def test_concurrent_calls_cross_the_budget_once_and_every_one_is_counted(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    TeamStore(conn, team).create(TeamOptions(max_tokens=50))
    stores = [
        TeamStore(redis.Redis.from_url(redis_url, decode_responses=True), team)
        for _ in range(CHARGERS)
    ]
    start = threading.Barrier(CHARGERS)

    def charge(store: TeamStore) -> Charge:
        start.wait()
        return store.charge(Usage(prompt_tokens=10))

    with ThreadPoolExecutor(CHARGERS) as pool:
        charges = list(pool.map(charge, stores))
    reason = "budget exceeded: 50 tokens used, max_tokens is 50"
    assert sum(c.crossed for c in charges) == 1
    assert sorted(c.exceeded or "" for c in charges) == ["", "", "", "", *[reason] * 16]
    store = TeamStore(conn, team)
    assert store.usage().prompt_tokens == 10 * CHARGERS
    [told] = store.messages.notices(SystemType.TEAM_BUDGET_EXCEEDED)
    assert told.content.startswith(f"{reason}: no teammate or lead starts another model call")


def test_team_create_takes_the_budget_from_the_teammates_table_or_its_flags(
    redis_url: str, conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    good = tmp_path / "team.toml"
    good.write_text("[teammates]\nmax_tokens = 1000\nmax_cost_usd = 2.5\n")
    assert cli("team", "create", "--file", str(good), *base(redis_url, team)).exit_code == 0
    options = TeamStore(conn, team).options
    assert (options.max_tokens, options.max_cost_usd) == (1000, 2.5)
    other = f"t{uuid.uuid4().hex[:10]}"
    assert (
        cli(
            "team", "create", "--file", str(good), "--max-tokens", "50", *base(redis_url, other)
        ).exit_code
        == 0
    )
    options = TeamStore(conn, other).options
    assert (options.max_tokens, options.max_cost_usd) == (50, 2.5)
    assert cli("teams", "--redis-url", redis_url).stdout.splitlines() == [
        f"{team}\t0\t0\t0 tokens (max 1,000)\tunpriced (max $2.5)\t-",
        f"{other}\t0\t0\t0 tokens (max 50)\tunpriced (max $2.5)\t-",
    ]

    for flags, message in (
        (["--max-tokens", "0"], "--max-tokens: Input should be greater than or equal to 1"),
        (["--max-cost-usd", "0"], "--max-cost-usd: Input should be greater than 0"),
        (
            ["--max-cost-usd", "inf"],
            "--max-cost-usd: Input should be less than or equal to 1000000",
        ),
    ):
        name = f"t{uuid.uuid4().hex[:10]}"
        refused = cli("team", "create", *flags, *base(redis_url, name))
        assert (refused.exit_code, refused.stderr) == (2, f"teamctl: {message}\n")
        assert not TeamStore(conn, name).exists()
    for field, value in (("max_tokens", "0"), ("max_cost_usd", "-1"), ("max_tokens", "1.5")):
        bad = tmp_path / "bad.toml"
        bad.write_text(f"[teammates]\n{field} = {value}\n")
        name = f"t{uuid.uuid4().hex[:10]}"
        refused = cli("team", "create", "--file", str(bad), *base(redis_url, name))
        assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
        assert f"teammates.{field}" in refused.stderr
        assert not TeamStore(conn, name).exists()


def test_past_the_budget_no_task_is_handed_out_and_a_held_one_goes_back_uncounted(
    conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(max_tokens=30))
    for name in ("alice", "bob"):
        store.spawn(name, role="dev", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    tasks = TeamTasks(store)
    tasks.add("held when the budget ran out")
    tasks.claim("alice", token, "task_1")
    assert store.charge(Usage(prompt_tokens=20, completion_tokens=20)).crossed
    # Her turn ends `budget`: the task goes back, not counted against its releases, not kept
    # from her; and no idle teammate is handed it (bob's turn could make no model call).
    assert (
        store.turns.end_turn(
            "alice", token, "budget", "alice is idle (budget)", error=SPENT_40, budget=True
        )
        == "idle"
    )
    task = tasks.get("task_1")
    assert (task.status, task.releases, task.released_from, task.requeue_reason) == (
        TaskStatus.READY,
        0,
        None,
        f"alice stopped: {SPENT_40}",
    )
    conn.hset(store.keys.teammate("bob"), mapping={"status": "idle", "job_id": ""})
    assert tasks.wake() == []
    assert tasks.get("task_1").status is TaskStatus.READY
