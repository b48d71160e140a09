"""Fallback models: a call moves to the role's next model once its own spent its retries on 5xx,
or at once on a context-window or content-policy refusal; the answering model is recorded (task,
result JSON, events, transcript, usage per model) and calls return to the primary when it
answers. Real Redis, the session's real workers, litellm against the scripted server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.teams.lead_tools import LeadTools, NotGrantable, SpawnArgs
from teamctl.shared.agent.fallbacks import (
    Cooldowns,
    FallbackCaller,
    FallbackNote,
    ModelLedger,
)
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.model_usage import usage_by_model
from teamctl.shared.errors import ConfigError, ModelError, ModelUnavailable
from teamctl.shared.keys import RunKeys, TeamKeys, model_cooldown
from teamctl.shared.runs.run_config import choose_models
from teamctl.shared.settings import Settings
from teamctl.shared.team_file import load_team_file
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_fallbacks import FALLBACK_STATUS
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import HttpError, ScriptedLLM
from tests.support.replies import member_answer
from tests.support.teamfile import team_file
from tests.support.teams import spawn
from tests.support.waiting import wait_until

CONTEXT_WINDOW = HttpError(
    400,
    "This model's maximum context length is 8192 tokens. However, "
    "your messages resulted in 9001 tokens.",
)
"""What litellm maps to ContextWindowExceededError for an OpenAI-compatible server."""
CONTENT_POLICY = HttpError(400, "Your request was rejected as a result of the safety system.")
"""What litellm maps to ContentPolicyViolationError for an OpenAI-compatible server."""
PLAN = [
    {"id": "a", "memberId": "m1", "task": "A"},
    {"id": "b", "memberId": "m1", "task": "B", "dependsOn": ["a"]},
]


def failing_first(
    count: int, failure: HttpError, then: Callable[[dict[str, Any]], str]
) -> Callable[[dict[str, Any]], Any]:
    """A handler answering `failure` to its first `count` requests, then as `then` does."""
    seen = [0]

    def handler(body: dict[str, Any]) -> Any:
        seen[0] += 1
        return failure if seen[0] <= count else then(body)

    return handler


def caller(
    conn: redis.Redis,
    fallbacks: list[str],
    *,
    retries: int = 1,
    cooldown_s: float = 0.0,
    notes: list[FallbackNote] | None = None,
    keys: RunKeys | None = None,
) -> FallbackCaller:
    client = LitellmClient(provider_keys=(), max_retries=retries, backoff_base_s=0.01)
    return FallbackCaller(
        client,
        fallbacks,
        1.0,
        Cooldowns(conn, cooldown_s),
        ModelLedger(conn, keys) if keys else None,
        on_fallback=None if notes is None else notes.append,
    )


def ask(fallbacks: FallbackCaller, model: str, llm: ScriptedLLM) -> str | None:
    reply = fallbacks.complete(model, [{"role": "user", "content": "hi"}], api_base=llm.api_base)
    return reply.model


def test_a_run_falls_back_on_503_and_returns_to_the_primary(
    llm: ScriptedLLM, workers: str, wconn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    # Task a: the primary answers 503 to its call and its one retry, the fallback answers;
    # task b (after a): the primary answers again, and takes the call back.
    primary = llm.script(
        f"primary-{run_id}", handler=failing_first(2, HttpError(503), member_answer)
    )
    backup = llm.script(f"backup-{run_id}", handler=member_answer)
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)]),
        "member": primary,
        "synth": llm.script(f"synth-{run_id}", ["the answer"]),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        members=[{"id": "m1"}],
        options={"model_max_retries": 1, "fallback_cooldown_s": 0.0},
    )

    result = CliRunner().invoke(
        main,
        [
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
            "--fallback-model",
            backup,
        ],
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed"
    states = {s["task_id"]: s for s in out["task_states"]}
    assert (states["a"]["model"], states["a"]["fallback_from"]) == (backup, primary)
    assert (states["b"]["model"], states["b"]["fallback_from"]) == (primary, None)
    assert len(llm.requests[f"primary-{run_id}"]) == 3
    assert len(llm.requests[f"backup-{run_id}"]) == 1
    by_model = out["usage_by_model"]
    assert by_model[backup]["calls"] == by_model[backup]["fallback_calls"] == 1
    assert by_model[primary]["calls"] == 1 and by_model[primary]["fallback_calls"] == 0
    # The planner and synthesizer had no fallback to take: their calls count under their models.
    assert by_model[models["planner"]]["calls"] == by_model[models["synth"]]["calls"] == 1
    fell_back = [m for m in out["messages"] if m["type"] == "model.fallback"]
    assert [(m["task_id"], m["to"]) for m in fell_back] == [("a", "lead")]
    assert (
        fell_back[0]["content"] == f"answered by fallback {backup} after {primary} (retries_spent)"
    )
    transcripts = {r["task_id"]: r["transcript"] for r in out["member_results"]}
    assert [m.get("model") for m in transcripts["a"] if m["role"] == "assistant"] == [backup]
    assert [m.get("model") for m in transcripts["b"] if m["role"] == "assistant"] == [primary]
    # What went to the providers carries no key of teamctl's own.
    sent = [
        m
        for body in llm.requests[f"backup-{run_id}"] + llm.requests[f"primary-{run_id}"]
        for m in body["messages"]
    ]
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"} for m in sent)
    status = CliRunner().invoke(main, ["status", run_id, "--redis-url", workers])
    assert f"{backup} (fallback for {primary})" in status.output
    assert "usage by model:" in status.output
    tasks = CliRunner().invoke(main, ["tasks", run_id, "--redis-url", workers])
    assert tasks.stdout.splitlines() == [
        f"a\tcompleted\tm1\t1\tmodel {backup} (fallback for {primary})",
        "b\tcompleted\tm1\t1\t-",
    ]


@pytest.mark.parametrize(
    ("refusal", "reason"), [(CONTEXT_WINDOW, "context_window"), (CONTENT_POLICY, "content_policy")]
)
def test_a_refusal_falls_back_at_once_without_retries(
    llm: ScriptedLLM, conn: redis.Redis, run_id: str, refusal: HttpError, reason: str
) -> None:
    primary = llm.script(f"primary-{run_id}", [refusal])
    backup = llm.script(f"backup-{run_id}", ["from the backup"])
    notes: list[FallbackNote] = []

    answered = ask(caller(conn, [backup], retries=3, notes=notes), primary, llm)

    assert answered == backup
    assert len(llm.requests[f"primary-{run_id}"]) == 1  # no retry: another model may fit
    assert [(p.model, p.reason) for n in notes for p in n.passed] == [(primary, reason)]
    # A refusal says nothing of the provider's health: no cooldown was started.
    assert not conn.exists(model_cooldown(primary, llm.api_base))


def test_a_cooled_down_primary_is_skipped_then_probed_again(
    llm: ScriptedLLM, conn: redis.Redis, run_id: str
) -> None:
    primary = llm.script(f"primary-{run_id}", [HttpError(503), HttpError(503), "back again"])
    backup = llm.script(f"backup-{run_id}", ["first", "second"])
    keys = RunKeys(run_id)
    fallbacks = caller(conn, [backup], cooldown_s=0.5, keys=keys)

    assert ask(fallbacks, primary, llm) == backup  # retries spent: cooldown starts
    assert ask(fallbacks, primary, llm) == backup  # skipped: no request reached the primary
    assert len(llm.requests[f"primary-{run_id}"]) == 2
    wait_until(
        lambda: not conn.exists(model_cooldown(primary, llm.api_base)),
        10,
        message="the primary's cooldown to end",
    )
    assert ask(fallbacks, primary, llm) == primary
    shares = usage_by_model(conn, keys)
    assert (shares[backup].calls, shares[backup].fallback_calls) == (2, 2)
    assert (shares[primary].calls, shares[primary].prompt_tokens) == (1, 11)


def test_the_last_model_is_never_skipped_and_its_error_is_raised(
    llm: ScriptedLLM, conn: redis.Redis, run_id: str
) -> None:
    primary = llm.script(f"primary-{run_id}", [HttpError(503), HttpError(503)])
    backup = llm.script(f"backup-{run_id}", [CONTEXT_WINDOW])
    with pytest.raises(ModelUnavailable) as raised:
        ask(caller(conn, [backup], cooldown_s=30), primary, llm)
    assert (raised.value.model, raised.value.reason) == (backup, "context_window")


def test_a_bad_request_is_not_a_reason_to_fall_back(
    llm: ScriptedLLM, conn: redis.Redis, run_id: str
) -> None:
    primary = llm.script(f"primary-{run_id}", [HttpError(400, "unknown parameter")])
    backup = llm.script(f"backup-{run_id}", [])
    with pytest.raises(ModelError) as raised:
        ask(caller(conn, [backup]), primary, llm)
    assert not isinstance(raised.value, ModelUnavailable)
    assert llm.requests[f"backup-{run_id}"] == []


def test_a_teammate_turn_falls_back(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    primary = llm.script(f"mate-{team}", [CONTEXT_WINDOW])
    backup = llm.script(f"mate-backup-{team}", ["done on the backup"])
    store = TeamStore(wconn, team)

    assert (
        spawn(workers, team, "ann", primary, llm.api_base, "--fallback-model", backup).exit_code
        == 0
    )

    wait_until(lambda: store.get("ann").status is TeammateStatus.IDLE, message="ann's turn")
    ann = store.get("ann")
    assert ann.fallbacks == [backup] and ann.last_error is None
    assert (ann.answered_model, ann.fallback_from) == (backup, primary)
    assert store.turns.memory("ann")[-1]["content"] == "done on the backup"
    events = wconn.xrange(TeamKeys(team).events)
    assert [
        fields["detail"] for _, fields in events if fields.get("status") == FALLBACK_STATUS
    ] == [f"answered by fallback {backup} after {primary} (context_window)"]
    assert usage_by_model(wconn, TeamKeys(team))[backup].fallback_calls == 1
    shown = CliRunner().invoke(main, ["team", "list", "-t", team, "--redis-url", workers])
    assert f"done (last call answered by fallback {backup})" in shown.output
    listed = CliRunner().invoke(main, ["teams", "--json", "--redis-url", workers])
    [row] = [row for row in json.loads(listed.stdout) if row["team"] == team]
    assert row["usage_by_model"][backup]["fallback_calls"] == 1


def test_the_lead_grants_only_fallbacks_it_was_granted(
    conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(grantable_models=["openai/granted"]))
    tools = LeadTools(store, "openai/lead", None, tmp_path, fallbacks=["openai/leads-own"])
    with pytest.raises(NotGrantable, match="fallback model 'openai/other' is not yours"):
        tools.spawn_teammate(
            SpawnArgs(
                name="eve", role="r", prompt="p", fallbacks=["openai/granted", "openai/other"]
            )
        )
    assert store.names() == []
    told = tools.spawn_teammate(
        SpawnArgs(
            name="ann", role="r", prompt="p", fallbacks=["openai/granted", "openai/leads-own"]
        )
    )
    assert told["fallbacks"] == ["openai/granted", "openai/leads-own"]
    # Without fallbacks of its own, a teammate on the lead's model takes the lead's.
    tools.spawn_teammate(SpawnArgs(name="bob", role="r", prompt="p"))
    assert store.get("bob").fallbacks == ["openai/leads-own"]


def test_fallbacks_per_role_follow_the_models_precedence(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(
        'model = "m"\nfallbacks = ["f1", "f2"]\n'
        'planner = { model = "p", fallbacks = ["pf"] }\n'
        '[[members]]\nid = "a"\n'
        '[[members]]\nid = "b"\nfallbacks = []\n'
    )
    team = load_team_file(path)
    models, _ = choose_models(team, None, None, Settings())
    a, b = team.members
    assert models.fallbacks_for_member(a) == ["f1", "f2"] and models.fallbacks_for_member(b) == []
    # The synthesizer without a model of its own uses the planner's, fallbacks included.
    assert models.planner_fallbacks == models.synthesizer_fallbacks == ["pf"]
    flagged, _ = choose_models(team, None, None, Settings(), ["x", "y", "x"])
    assert flagged.fallbacks_for_member(b) == ["x", "y"] == flagged.planner_fallbacks


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            'fallbacks = ["two words"]',
            "fallbacks: Value error, model 'two words': a model string has no spaces or commas",
        ),
        ('fallbacks = [""]', "fallbacks: Value error, a model is a non-empty name"),
        (
            "[options]\nfallback_after_s = -1",
            "options.fallback_after_s: Input should be greater than or equal to 0",
        ),
    ],
)
def test_bad_fallbacks_in_a_team_file_exit_2(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "team.toml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=error.replace("(", r"\(")):
        load_team_file(path)
    result = CliRunner().invoke(main, ["run", "x", "--team", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_a_bad_fallback_flag_exits_2_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", "x", "--fallback-model", "a,b"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "teamctl: --fallback-model: model 'a,b': a model string "
        "has no spaces or commas (e.g. "
        "anthropic/claude-3-5-haiku-latest)"
    )


def test_the_python_api_checks_fallbacks_as_a_team_file() -> None:
    from teamctl import Team

    with pytest.raises(ConfigError, match="Team\\(...\\): fallbacks: Value error, model 'a b'"):
        Team(fallbacks=["a b"])


class WaitRecorder(LitellmClient):
    """LitellmClient, noting the wait limit each call was given (what the limiter honours)."""

    def __init__(self) -> None:
        super().__init__(provider_keys=(), max_retries=0)
        self.wait_limits: list[tuple[str, float | None]] = []

    def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
        wait_limit_s: float | None = None,
    ) -> Any:
        self.wait_limits.append((model, wait_limit_s))
        return super().complete(
            model, messages, tools=tools, api_base=api_base, wait_limit_s=wait_limit_s
        )


def test_only_a_model_with_another_after_it_waits_at_most_fallback_after_s(
    llm: ScriptedLLM, run_id: str
) -> None:
    primary = llm.script(f"primary-{run_id}", [HttpError(503)])
    backup = llm.script(f"backup-{run_id}", ["answered"])
    client = WaitRecorder()
    fallbacks = FallbackCaller(client, [backup], 2.5)
    assert ask(fallbacks, primary, llm) == backup
    # The last model may wait for its account as long as the call may: nothing comes after it.
    assert client.wait_limits == [(primary, 2.5), (backup, None)]


def test_the_lead_falls_back(
    redis_url: str, conn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    primary = llm.script(f"lead-{team}", [CONTENT_POLICY])
    backup = llm.script(f"lead-backup-{team}", ["noted"])
    result = CliRunner().invoke(
        main,
        [
            "lead",
            "-t",
            team,
            "--redis-url",
            redis_url,
            "--workers",
            "0",
            "--model",
            primary,
            "--api-base",
            llm.api_base,
            "--fallback-model",
            backup,
            "-m",
            "Hello.",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "noted" in result.output
    events = conn.xrange(TeamKeys(team).events)
    assert [(f["mate"], f["detail"]) for _, f in events if f.get("status") == FALLBACK_STATUS] == [
        ("lead", f"answered by fallback {backup} after {primary} (content_policy)")
    ]
