"""Provider limits shared by every worker: the account's pause after one 429, limits learned from
OpenAI's and Anthropic's headers, waiting without losing the claim, FIFO slots between runs,
budget reservations under a race, and a cancel that ends a wait. Real Redis, real litellm over
HTTP to the scripted server, real RQ workers where a run's task is involved."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue
from teamctl.shared.agent.llm import LitellmClient, load_litellm, provider_name
from teamctl.shared.board import TaskBoard
from teamctl.shared.budget import Budget
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import BudgetSpent, ConfigError, ModelUnavailable
from teamctl.shared.keys import LimitKeys, RunKeys
from teamctl.shared.providers.limit_headers import learned_from, retry_after_s
from teamctl.shared.providers.limits import (
    WORST_OUTPUT_TOKENS,
    CallScope,
    ProviderLimits,
    estimate_prompt_tokens,
)
from teamctl.shared.providers.limits_config import ModelLimit, parse_limits
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.settings import load_settings
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.team_file import Member
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import Headed, HttpError, ScriptedLLM
from tests.support.teams import cli, spawn
from tests.support.waiting import wait_until
from tests.support.workers import workers_on_own_queue

MESSAGES = [{"role": "user", "content": "Say done."}]
CALL_TOKENS = 18
"""What each scripted reply reports: 11 prompt and 7 completion tokens."""


def client(conn: redis.Redis, **limits: ModelLimit) -> LitellmClient:
    """A gated client as a worker builds one, with `limits` configured per model."""
    return LitellmClient(
        provider_keys=(),
        timeout_s=10,
        max_retries=1,
        backoff_base_s=0.01,
        limits=ProviderLimits(conn, dict(limits)),
    )


def account(conn: redis.Redis, model: str, api_base: str) -> LimitKeys:
    """The keys of the account a worker without provider keys calls `model` on."""
    return ProviderLimits(conn).keys_for(provider_name(load_litellm(), model), api_base, ())


def test_limits_format_and_headers_parse_as_providers_send_them() -> None:
    assert parse_limits("openai/gpt-4o-mini=rpm:500,tpm:200000; ollama/llama3:8b=rpm:6") == {
        "openai/gpt-4o-mini": ModelLimit(rpm=500, tpm=200000),
        "ollama/llama3:8b": ModelLimit(rpm=6),
    }
    with pytest.raises(ConfigError, match="write MODEL=rpm:N,tpm:N"):
        parse_limits("openai/gpt-4o-mini rpm 500")
    openai = learned_from(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-limit-tokens": "200000",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "6m0s",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "120ms",
        }
    )
    assert (openai.rpm, openai.tpm, openai.model_pause_s) == (500, 200000, 360.0)
    now = time.time()
    reset = datetime.fromtimestamp(now + 7, UTC).isoformat().replace("+00:00", "Z")
    anthropic = learned_from(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-tokens-limit": "40000",
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": reset,
        },
        now,
    )
    assert (anthropic.rpm, anthropic.tpm) == (50, 40000)
    assert anthropic.model_pause_s == pytest.approx(7, abs=0.01)
    date = (datetime.now(UTC) + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert retry_after_s({"retry-after": date}) == pytest.approx(30, abs=1.5)
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({}) is None


def test_openai_headers_set_the_bucket_and_a_spent_quota_pauses_the_model(
    llm: ScriptedLLM, conn: redis.Redis
) -> None:
    model = llm.script(
        "lim-openai",
        [
            Headed(
                "done",
                {
                    "x-ratelimit-limit-requests": "120",
                    "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": "2s",
                    "x-ratelimit-limit-tokens": "90000",
                },
            )
        ],
    )
    gated = client(conn)
    assert gated.complete(model, MESSAGES, api_base=llm.api_base).content == "done"
    keys = account(conn, model, llm.api_base)
    [bucket] = conn.keys(keys.bucket("0" * 24).rsplit(":", 1)[0] + ":*")
    learned = conn.hgetall(bucket)
    assert (learned["model"], learned["rpm"], learned["tpm"]) == (model, "120", "90000")
    assert int(learned["paused_until"]) > now_ms() + 1000
    # Paused past the caller's bound: no request, ModelUnavailable("paused") at once.
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as refused:
        gated.complete(model, MESSAGES, api_base=llm.api_base, wait_limit_s=0.5)
    assert refused.value.reason == "paused" and time.monotonic() - started < 0.5
    assert len(llm.requests["lim-openai"]) == 1
    assert "sk-" not in str(conn.hgetall(keys.account)) and keys.account.count("{") == 1


def test_anthropic_429_through_litellm_pauses_the_account_and_learns_its_limit(
    llm: ScriptedLLM, conn: redis.Redis
) -> None:
    llm.script(
        "claude-lim",
        [
            Headed(
                HttpError(429, "rate limited"),
                {
                    "retry-after": "5",
                    "anthropic-ratelimit-requests-limit": "50",
                    "anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": (
                        datetime.now(UTC) + timedelta(seconds=5)
                    ).isoformat(),
                },
            )
        ],
    )
    model, base = "anthropic/claude-lim", llm.api_base.removesuffix("/v1")
    with pytest.raises(ModelUnavailable) as refused:
        client(conn).complete(model, MESSAGES, api_base=base, wait_limit_s=1.0)
    assert refused.value.reason == "paused"
    keys = account(conn, model, base)
    assert int(conn.hget(keys.account, "paused_until") or 0) > now_ms() + 3000
    buckets = conn.keys(keys.account.rsplit(":", 1)[0] + ":model:*")
    assert [conn.hget(b, "rpm") for b in buckets] == ["50"]
    assert len(llm.requests["claude-lim"]) == 1


def limited_run(
    conn: redis.Redis,
    run_id: str,
    tmp_path: Path,
    api_base: str,
    members: dict[str, tuple[str, str]],
    tasks: list[TaskSpec],
    **options: object,
) -> RunStore:
    """A running run whose members (id -> (queue, model)) work on `tasks`, no coordinator."""
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective="o",
        members=[Member(id=m, model=model, queue=queue) for m, (queue, model) in members.items()],
        options=RunOptions(**options),  # type: ignore[arg-type]
        models=ModelChoice(planner="p", synthesizer="s", member_default="m", api_base=api_base),
        workspace_dir=str(tmp_path),
        created_ms=now_ms(),
    )
    store = RunStore(conn, RunKeys(run_id))
    store.create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(tasks)
    return store


def enqueue(redis_url: str, queue: str, run_id: str, task_id: str) -> None:
    Queue(queue, connection=redis.Redis.from_url(redis_url)).enqueue(
        "teamctl.worker.jobs.run_task", run_id, task_id, job_timeout=120
    )


def test_one_429_pauses_every_worker_of_the_account_and_the_wait_keeps_the_claim(
    llm: ScriptedLLM, redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"shared-{run_id}", [HttpError(429, "slow down", retry_after_s=4), "done", "done"]
    )
    limited_run(
        conn,
        run_id,
        tmp_path,
        llm.api_base,
        {"m1": ("lim-a", model), "m2": ("lim-b", model)},
        [TaskSpec(id="a", member_id="m1", task="A"), TaskSpec(id="b", member_id="m2", task="B")],
        heartbeat_ttl_s=1.0,
    )
    board, keys = TaskBoard(conn, RunKeys(run_id)), account(conn, model, llm.api_base)
    with (
        workers_on_own_queue(redis_url, "lim-a", 1, tmp_path / "a"),
        workers_on_own_queue(redis_url, "lim-b", 1, tmp_path / "b"),
    ):
        enqueue(redis_url, "lim-a", run_id, "a")
        wait_until(
            lambda: conn.hget(keys.account, "paused_until"),
            30,
            message="the 429 to pause the account",
        )
        enqueue(redis_url, "lim-b", run_id, "b")  # the other worker, the other queue
        # The second worker waits for the account too, and says so on its task.
        wait_until(
            lambda: conn.hget(RunKeys(run_id).task("b"), "waiting_model") == model,
            30,
            message="task b to show its wait",
        )
        listed = cli("tasks", run_id, "--redis-url", redis_url).stdout
        assert re.search(
            rf"^b\tin_progress\t\S+\t1\twaiting for {re.escape(model)}: \d+\.\d s$", listed, re.M
        ), listed
        wait_until(
            lambda: all(t and t.status == TaskStatus.COMPLETED for t in board.get_many(["a", "b"])),
            60,
            message="both tasks to complete",
        )
    refused_at, *served = llm.request_times[f"shared-{run_id}"]
    assert len(served) == 2 and min(served) - refused_at >= 3.9
    # Waiting 4 s through a 1 s claim TTL lost no claim: one attempt each, none reclaimed.
    assert [(t.attempts, t.reclaimed) for t in board.get_many(["a", "b"]) if t] == [
        (1, False),
        (1, False),
    ]
    assert conn.hget(RunKeys(run_id).task("b"), "waiting_model") is None


def test_a_cancel_ends_a_wait_for_the_provider(
    llm: ScriptedLLM, redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(f"cancel-{run_id}", [HttpError(429, "quota", retry_after_s=60)])
    store = limited_run(
        conn,
        run_id,
        tmp_path,
        llm.api_base,
        {"m1": ("lim-c", model)},
        [TaskSpec(id="a", member_id="m1", task="A")],
    )
    board = TaskBoard(conn, RunKeys(run_id))
    with workers_on_own_queue(redis_url, "lim-c", 1, tmp_path / "c"):
        enqueue(redis_url, "lim-c", run_id, "a")
        wait_until(
            lambda: conn.hget(RunKeys(run_id).task("a"), "waiting_model"),
            30,
            message="the task to wait for its account",
        )
        conn.set(store.keys.cancel, "cancelled")
        started = time.monotonic()
        wait_until(
            lambda: (t := board.get("a")) and t.status != TaskStatus.IN_PROGRESS,
            10,
            message="the cancel to end the wait",
        )
    assert time.monotonic() - started < 5
    task = board.get("a")
    assert task is not None and task.status == TaskStatus.FAILED
    assert "cancelled" in (task.error or "")
    assert len(llm.requests[f"cancel-{run_id}"]) == 1


def test_slots_are_first_come_first_served_between_runs_sharing_an_account(
    llm: ScriptedLLM, redis_url: str
) -> None:
    model = llm.script("fifo-lim", ["done"], repeat_last=True)
    order: list[str] = []
    slots = 0
    lock = threading.Lock()

    class CountedLimits(ProviderLimits):
        """The workers' limiter, counting the slots handed out (when its Lua call returns)."""

        def _run_take(self, *args: Any) -> tuple[str, int, str, bool]:
            nonlocal slots
            verdict = super()._run_take(*args)
            with lock:
                slots += 1
            return verdict

    def call(who: str) -> None:
        conn = redis.Redis.from_url(redis_url, decode_responses=True)
        limits = CountedLimits(conn, {model: ModelLimit(rpm=240)})
        LitellmClient(provider_keys=(), timeout_s=10, max_retries=1, limits=limits).complete(
            model, MESSAGES, api_base=llm.api_base
        )
        with lock:
            order.append(who)

    def ask(who: str, count: int, slots_after: int) -> list[threading.Thread]:
        """`count` callers of run `who`, returned once all of them hold their slots."""
        callers = [threading.Thread(target=call, args=(who,)) for _ in range(count)]
        for thread in callers:
            thread.start()
        wait_until(lambda: slots >= slots_after, 60, message=f"{who}'s slots")
        return callers

    # Run A asks for 16 slots at once, run B for one after them, then A for 8 more.
    callers = ask("A", 16, 16) + ask("B", 1, 17) + ask("A2", 8, 25)
    for thread in callers:
        thread.join(60)
    # 4/s with a burst of 4: B waits behind A's 16 only, never behind what A asked after it.
    assert order.index("B") < order.index("A2") and len(order) == 25
    assert order.index("B") >= 4  # it did wait: A's burst went first


def test_reservations_keep_racing_callers_within_the_budget(
    llm: ScriptedLLM, redis_url: str, run_id: str
) -> None:
    model = llm.script("budget-lim", ["done"], repeat_last=True, latency_s=0.05)
    worst = estimate_prompt_tokens({"messages": MESSAGES}) + WORST_OUTPUT_TOKENS
    max_tokens = worst + 5 * CALL_TOKENS  # covers 6 calls made one at a time, at most
    spent: list[str] = []

    def work() -> None:
        conn = redis.Redis.from_url(redis_url, decode_responses=True)
        budget = Budget(conn, RunKeys(run_id), max_tokens=max_tokens, max_cost_usd=None)
        gated = client(conn).scoped(CallScope(budget=budget))
        try:
            while True:
                gated.complete(model, MESSAGES, api_base=llm.api_base)
        except BudgetSpent as exc:
            spent.append(str(exc))

    workers = [threading.Thread(target=work) for _ in range(8)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    usage = conn.hgetall(RunKeys(run_id).usage)
    calls = len(llm.requests["budget-lim"])
    assert len(spent) == 8 and 1 <= calls <= 6
    assert int(usage["prompt_tokens"]) + int(usage["completion_tokens"]) == calls * CALL_TOKENS
    assert int(usage["reserved_tokens"]) == 0 and conn.zcard(RunKeys(run_id).reservations) == 0


def test_the_suggested_top_up_covers_the_next_calls_worst_case(
    llm: ScriptedLLM, redis_url: str, run_id: str
) -> None:
    model = llm.script("topup-lim", ["done"])
    long_prompt = [{"role": "user", "content": "word " * 12_000}]  # 15,000 tokens estimated
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    budget = Budget(conn, RunKeys(run_id), max_tokens=100, max_cost_usd=None)
    gated = client(conn).scoped(CallScope(budget=budget))
    with pytest.raises(BudgetSpent, match="the next call may take 19097, max_tokens is 100"):
        gated.complete(model, long_prompt, api_base=llm.api_base)
    assert llm.requests["topup-lim"] == []

    flag = budget.top_up_flag()

    assert flag == "--add-tokens 19000"  # the worst case past the 100 left, rounded up
    budget.top_up(tokens=int(flag.split()[1]))
    assert gated.complete(model, long_prompt, api_base=llm.api_base).content == "done"
    assert budget.exceeded() is None


def test_a_worker_with_an_unreadable_limits_setting_says_how_to_write_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMCTL_LIMITS", "openai/gpt-4o-mini:500")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert refused.value.exit_code == 2 and "\n" not in str(refused.value)
    assert "TEAMCTL_LIMITS=" in str(refused.value) and "MODEL=rpm:N,tpm:N" in str(refused.value)
    monkeypatch.setenv("TEAMCTL_LIMITS", "off")
    assert load_settings().shared_limits is False


def test_a_teammate_waiting_for_its_provider_says_so_on_its_record(
    llm: ScriptedLLM, workers: str, wconn: redis.Redis, team: str
) -> None:
    model = llm.script(f"mate-{team}", [HttpError(429, "busy", retry_after_s=3), "ready"])
    assert spawn(workers, team, "alice", model, llm.api_base).exit_code == 0
    store = TeamStore(wconn, team)
    wait_until(
        lambda: store.get("alice").waiting_model == model,
        30,
        message="alice's turn to show its wait",
    )
    listed = cli("team", "list", "-t", team, "--redis-url", workers).stdout
    assert re.search(
        rf"^alice\s+working\s+.*waiting for {re.escape(model)}: \d+\.\d s$", listed, re.M
    ), listed
    wait_until(
        lambda: store.get("alice").status is TeammateStatus.IDLE, 30, message="alice's turn to end"
    )
    alice = store.get("alice")
    assert alice.waiting_model is None and alice.last_error is None
    refused_at, served_at = llm.request_times[f"mate-{team}"]
    assert served_at - refused_at >= 2.9
