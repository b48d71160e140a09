"""README promises about configuration: where the model, the API base and Redis come from, and
every run option as a `run` flag. Real Redis, real workers, litellm against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import DEFAULT_MODEL_FOR_KEY
from teamctl.shared.runs.store import RunStore
from teamctl.shared.teams.options import TeamOptions

from tests.support.cli import run_cli
from tests.support.llm import HttpError, ScriptedLLM
from tests.support.replies import member_answer

ONE_TASK_PLAN = json.dumps({"tasks": [{"id": "a", "memberId": "researcher", "task": "A"}]})


def one_model_for_every_role(body: dict[str, Any]) -> str:
    """A model serving planner, members and synthesizer, told apart by their prompts."""
    prompt = json.dumps(body["messages"])
    if "You are a team planner." in prompt:
        return ONE_TASK_PLAN
    if "You are the team lead." in prompt:
        return "final answer"
    return member_answer(body)


def stored_spec(url: str, run_id: str) -> Any:
    return RunStore(redis.Redis.from_url(url, decode_responses=True), RunKeys(run_id)).spec()


def test_model_and_api_base_from_the_environment_alone(
    llm: ScriptedLLM, workers: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TEAMCTL_MODEL names every role's model, TEAMCTL_API_BASE where to reach it; no flags."""
    model = llm.script(f"env-{run_id}", handler=one_model_for_every_role)
    monkeypatch.setenv("TEAMCTL_MODEL", model)
    monkeypatch.setenv("TEAMCTL_API_BASE", llm.api_base)

    result = CliRunner().invoke(
        main,
        ["run", "Ship it", "--redis-url", workers, "--workers", "0", "--run-id", run_id, "--json"],
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["output"]) == ("completed", "final answer")
    assert "offline model" not in result.stderr
    models = stored_spec(workers, run_id).models
    assert (models.planner, models.synthesizer, models.member_default, models.api_base) == (
        model,
        model,
        model,
        llm.api_base,
    )
    # Planner, the member (in a worker process) and synthesizer all reached the scripted server.
    assert len(llm.requests[f"env-{run_id}"]) == 3


@pytest.mark.parametrize("key_var", sorted(DEFAULT_MODEL_FOR_KEY))
def test_a_provider_key_picks_that_providers_small_default(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key_var: str,
) -> None:
    """Members with no model get the key's provider default; planner and synthesizer are
    scripted (the plan is unusable and not broadcast, so no member calls a real provider)."""
    monkeypatch.setenv(key_var, "sk-test-not-a-real-key")
    planner = llm.script(f"plan-{run_id}", ["no plan here"])
    synth = llm.script(f"synth-{run_id}", ["nothing to merge"])
    team = tmp_path / "team.toml"
    team.write_text(f'planner = {{ model = "{planner}" }}\nsynthesizer = {{ model = "{synth}" }}\n')

    result = run_cli(llm, workers, run_id, team, "--no-broadcast-on-planner-failure")

    assert result.exit_code == 0, result.output
    assert "offline model" not in result.stderr
    models = stored_spec(workers, run_id).models
    assert (models.planner, models.synthesizer, models.member_default) == (
        planner,
        synth,
        DEFAULT_MODEL_FOR_KEY[key_var],
    )


def test_teamctl_model_wins_over_a_provider_key(
    llm: ScriptedLLM, workers: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    # Planner first, then synthesizer: both are this one model.
    model = llm.script(f"env-{run_id}", ["no plan here", "nothing to merge"])
    monkeypatch.setenv("TEAMCTL_MODEL", model)

    result = CliRunner().invoke(
        main,
        [
            "run",
            "x",
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--no-broadcast-on-planner-failure",
        ],
    )

    assert result.exit_code == 0, result.output
    models = stored_spec(workers, run_id).models
    assert (models.planner, models.synthesizer, models.member_default) == (model, model, model)


def test_workers_from_the_environment_is_used(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --redis-url: $REDIS_URL is used, and no embedded server is started."""
    monkeypatch.setenv("REDIS_URL", workers)
    planner = llm.script(f"plan-{run_id}", ["no plan here"])
    synth = llm.script(f"synth-{run_id}", ["nothing to merge"])
    team = tmp_path / "team.toml"
    team.write_text(f'model = "{planner}"\nsynthesizer = {{ model = "{synth}" }}\n')
    runner = CliRunner()

    result = runner.invoke(
        main,
        [
            "run",
            "x",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--no-broadcast-on-planner-failure",
        ],
    )

    assert result.exit_code == 0, result.output
    assert f"run {run_id} on {workers}" in result.stderr
    assert (
        RunStore(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
        .state()
        .status
        == "completed"
    )
    status = runner.invoke(main, ["status", run_id])
    assert status.stdout.startswith(f"{run_id}: completed")
    assert not (tmp_path / "state" / "redis").exists()  # the embedded server was never started


NON_DEFAULT_FLAG_VALUES: dict[str, tuple[list[str], object]] = {
    "parallel_dispatch": (["--no-parallel-dispatch"], False),
    "max_concurrency": (["--max-concurrency", "2"], 2),
    "max_rounds": (["--max-rounds", "7"], 7),
    "continue_on_member_error": (["--no-continue-on-member-error"], False),
    "fail_on_unknown_member": (["--fail-on-unknown-member"], True),
    "broadcast_on_planner_failure": (["--no-broadcast-on-planner-failure"], False),
    "enable_message_bus": (["--no-enable-message-bus"], False),
    "include_original_objective_in_dispatch": (
        ["--no-include-original-objective-in-dispatch"],
        False,
    ),
    "include_task_context_in_dispatch": (["--no-include-task-context-in-dispatch"], False),
    "include_message_history_in_dispatch": (["--no-include-message-history-in-dispatch"], False),
    "message_history_limit": (["--message-history-limit", "5"], 5),
    "require_plan_approval": (["--require-plan-approval"], True),
    "enable_member_team_tools": (["--no-enable-member-team-tools"], False),
    "dispatch": (["--dispatch", "barrier"], "barrier"),
    "heartbeat_ttl_s": (["--heartbeat-ttl-s", "12.5"], 12.5),
    "max_attempts": (["--max-attempts", "5"], 5),
    "member_max_steps": (["--member-max-steps", "8"], 8),
    "max_tokens": (["--max-tokens", "5000"], 5000),
    "max_cost_usd": (["--max-cost-usd", "0.75"], 0.75),
    "timeout_s": (["--timeout-s", "900"], 900.0),
    "model_timeout_s": (["--model-timeout-s", "45"], 45.0),
    "model_max_retries": (["--model-max-retries", "1"], 1),
    "max_message_bytes": (["--max-message-bytes", "4096"], 4096),
    "dependency_output_chars": (["--dependency-output-chars", "1000"], 1000),
    "bus_max_messages": (["--bus-max-messages", "5000"], 5000),
    "lease_ttl_s": (["--lease-ttl-s", "20"], 20.0),
    "redis_outage_s": (["--redis-outage-s", "30"], 30.0),
    "retention_s": (["--retention-s", "86400"], 86400),
    "tool_result_max_chars": (["--tool-result-max-chars", "500"], 500),
    "tool_timeout_s": (["--tool-timeout-s", "30"], 30.0),
    "max_task_releases": (["--max-task-releases", "5"], 5),
    "transcript_max_chars": (["--transcript-max-chars", "0"], 0),
    "mcp_start_timeout_s": (["--mcp-start-timeout-s", "12"], 12.0),
    "mcp_list_timeout_s": (["--mcp-list-timeout-s", "7.5"], 7.5),
    "mcp_call_timeout_s": (["--mcp-call-timeout-s", "90"], 90.0),
    "mcp_idle_s": (["--mcp-idle-s", "60"], 60.0),
    "workspace_file_max_bytes": (["--workspace-file-max-bytes", "4096"], 4096),
    "workspace_max_bytes": (["--workspace-max-bytes", "8192"], 8192),
    "workspace_max_files": (["--workspace-max-files", "50"], 50),
    "journal_max_bytes": (["--journal-max-bytes", "5000"], 5000),
    "fallback_after_s": (["--fallback-after-s", "2.5"], 2.5),
    "fallback_cooldown_s": (["--fallback-cooldown-s", "60"], 60.0),
}


def test_run_help_lists_every_option_as_a_flag() -> None:
    result = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for name, info in RunOptions.model_fields.items():
        flag = "--" + name.replace("_", "-")
        expected = f"{flag} / --no-{flag[2:]}" if info.annotation is bool else flag
        assert expected in result.stdout, f"`run --help` does not list {expected}"


@pytest.mark.parametrize("name", list(RunOptions.model_fields))
def test_each_option_given_as_a_flag_lands_in_the_stored_spec(
    llm: ScriptedLLM, workers: str, run_id: str, name: str
) -> None:
    """The planner refuses, so the run fails at once, after its spec was stored."""
    assert name in NON_DEFAULT_FLAG_VALUES, f"add a non-default flag value for option {name}"
    args, value = NON_DEFAULT_FLAG_VALUES[name]
    assert value != RunOptions.model_fields[name].default

    result = CliRunner().invoke(
        main,
        [
            "run",
            "x",
            "--model",
            llm.script(f"refuses-{run_id}", [HttpError(400, "no")]),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
            *args,
        ],
    )

    assert result.exit_code == 1 and "planner failed" in result.stderr, result.output
    options = stored_spec(workers, run_id).options
    assert getattr(options, name) == value
    others = {k: v for k, v in options.model_dump().items() if k != name}
    assert others == {k: v for k, v in RunOptions().model_dump().items() if k != name}


def test_a_tool_call_is_never_waited_for_past_the_run_or_the_turn() -> None:
    """A hung tool would otherwise outlive the job RQ kills, and run again with the rerun."""
    assert RunOptions().tool_wait_s == 120
    assert RunOptions(timeout_s=30).tool_wait_s == 30
    assert TeamOptions().tool_wait_s == 120
    assert TeamOptions(turn_timeout_s=45).tool_wait_s == 45
