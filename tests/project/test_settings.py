"""Settings: the environment read once at an edge, the one model precedence, and a setting that
cannot be used as one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from pydantic import Field, ValidationError
from teamctl.coordinator.cli import main
from teamctl.coordinator.runs.run import RunRequest, create_run
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.run_config import (
    DEFAULT_MODEL_FOR_KEY,
    ModelSource,
    choose_models,
    pick_model,
)
from teamctl.shared.settings import Settings, load_settings, settings_error
from teamctl.shared.team_file import RoleModel, TeamFile, load_team_file

BOTH_KEYS = {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}


def test_the_model_precedence_is_flag_team_file_environment_provider_key_offline() -> None:
    """Each step down the order is taken only once everything above it is absent."""
    expected = [
        ("flag-model", ModelSource.FLAG),
        ("file-model", ModelSource.TEAM_FILE),
        ("env-model", ModelSource.ENVIRONMENT),
        (DEFAULT_MODEL_FOR_KEY["OPENAI_API_KEY"], ModelSource.PROVIDER_KEY),
        (OFFLINE_MODEL, ModelSource.OFFLINE),
    ]
    for absent, wanted in enumerate(expected):
        settings = Settings(
            TEAMCTL_MODEL="env-model" if absent < 3 else None,
            provider_keys=BOTH_KEYS if absent < 4 else (),
        )
        picked = pick_model(
            "flag-model" if absent < 1 else None, "file-model" if absent < 2 else None, settings
        )
        assert picked == wanted, f"with the first {absent} sources absent"


def test_the_first_provider_with_a_key_picks_the_default() -> None:
    only_anthropic = Settings(provider_keys={"ANTHROPIC_API_KEY", "SOMEONE_ELSES_API_KEY"})
    assert pick_model(None, None, only_anthropic) == (
        DEFAULT_MODEL_FOR_KEY["ANTHROPIC_API_KEY"],
        ModelSource.PROVIDER_KEY,
    )
    assert pick_model(None, None, Settings(provider_keys={"SOMEONE_ELSES_API_KEY"})) == (
        OFFLINE_MODEL,
        ModelSource.OFFLINE,
    )


def test_each_role_takes_its_own_team_file_model_before_the_team_wide_one() -> None:
    team = TeamFile(
        model="team-model",
        planner=RoleModel(model="planner-model"),
        synthesizer=RoleModel(model="synth-model"),
    )
    settings = Settings(TEAMCTL_MODEL="env-model")

    models, source = choose_models(team, None, None, settings)
    assert (
        models.planner,
        models.synthesizer,
        models.member_default,
        models.member_override,
        source,
    ) == ("planner-model", "synth-model", "team-model", None, ModelSource.TEAM_FILE)
    # As AI4J: a synthesizer without a model of its own falls back to the planner's.
    planner_only = TeamFile(model="team-model", planner=RoleModel(model="planner-model"))
    assert choose_models(planner_only, None, None, settings)[0].synthesizer == "planner-model"
    models, source = choose_models(TeamFile(), None, None, settings)
    assert (models.planner, models.synthesizer, models.member_default, source) == (
        "env-model",
        "env-model",
        "env-model",
        ModelSource.ENVIRONMENT,
    )


def test_a_synthesizer_without_a_model_or_queue_of_its_own_uses_the_planners_queue(
    redis_url: str, tmp_path: Path
) -> None:
    """As for its model: the planner's queue is where the workers with that model's keys are."""
    planner = RoleModel(model="planner-model", queue="keys")
    assert TeamFile(planner=planner).synthesizer_queue() == "keys"
    assert TeamFile(planner=planner, synthesizer=RoleModel(model=None)).synthesizer_queue() == (
        "keys"
    )  # what Team(synthesizer_model=None) builds
    own_model = TeamFile(planner=planner, synthesizer=RoleModel(model="synth-model"))
    assert own_model.synthesizer_queue() == "members"
    own_queue = TeamFile(planner=planner, synthesizer=RoleModel(queue="other"))
    assert own_queue.synthesizer_queue() == "other"
    # Through a team file and the stored run: the synthesizer's call goes to `keys`.
    team = tmp_path / "team.toml"
    team.write_text('planner = { model = "planner-model", queue = "keys" }\n')
    loaded = load_team_file(team)
    models, _ = choose_models(loaded, None, None, Settings())
    spec = create_run(
        redis.Redis.from_url(redis_url, decode_responses=True),
        RunRequest(objective="o", team=loaded, models=models, workspace_root=tmp_path / "ws"),
    )
    assert (spec.models.synthesizer, spec.synthesizer_queue) == ("planner-model", "keys")
    assert spec.queues == ["keys", "members"]


def test_the_api_base_flag_wins_over_the_environment() -> None:
    settings = Settings(TEAMCTL_API_BASE="http://env-host:8000/v1")
    assert choose_models(TeamFile(), None, None, settings)[0].api_base == (
        "http://env-host:8000/v1"
    )
    assert choose_models(TeamFile(), None, "https://flag-host/v1", settings)[0].api_base == (
        "https://flag-host/v1"
    )
    assert choose_models(TeamFile(), None, None, Settings())[0].api_base is None


def test_settings_come_from_the_environment_and_empty_counts_as_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://env-host:6379/0")
    monkeypatch.setenv("TEAMCTL_MODEL", "")
    monkeypatch.setenv("TEAMCTL_API_BASE", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("GROQ_API_KEY", "")
    monkeypatch.setenv("provider_keys", "[not json")  # a field's name is not a variable's
    monkeypatch.setenv("model", "lower-case-is-another-variable")

    settings = load_settings()

    assert (settings.redis_url, settings.model, settings.api_base) == (
        "redis://env-host:6379/0",
        None,
        "http://127.0.0.1:8000/v1",
    )
    assert settings.provider_keys == {"OPENAI_API_KEY"}
    assert "sk-secret-value" not in repr(settings)  # names of keys, never their values
    assert (settings.state_dir, settings.state_dir_from_env) == (tmp_path / "state", True)


def test_the_state_dir_defaults_to_the_xdg_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEAMCTL_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert (load_settings().state_dir, load_settings().state_dir_from_env) == (
        tmp_path / "xdg" / "teamctl",
        False,
    )
    monkeypatch.setenv("XDG_STATE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_settings().state_dir == tmp_path / "home" / ".local" / "state" / "teamctl"


def test_a_value_that_does_not_parse_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every setting today is free text; a numeric one added later fails this way."""

    class WithANumber(Settings):
        outage_s: float = Field(60.0, validation_alias="TEAMCTL_TEST_OUTAGE_S")

    monkeypatch.setenv("TEAMCTL_TEST_OUTAGE_S", "soon")
    with pytest.raises(ValidationError) as info:
        WithANumber()
    error = settings_error(info.value)
    assert isinstance(error, ConfigError) and error.exit_code == 2
    assert str(error) == (
        "TEAMCTL_TEST_OUTAGE_S='soon' in the environment: Input should be a "
        "valid number, unable to parse string as a number; set "
        "TEAMCTL_TEST_OUTAGE_S to a valid value or unset it"
    )


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        ([], "127.0.0.1:8000/v1", "TEAMCTL_API_BASE '127.0.0.1:8000/v1'"),
        (["--api-base", "ftp://host/v1"], "http://fine/v1", "--api-base 'ftp://host/v1'"),
        (["--api-base", "http://[::1/v1"], None, "--api-base 'http://[::1/v1'"),
    ],
)
def test_an_api_base_that_is_not_an_http_url_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: str | None, named: str
) -> None:
    """Refused before Redis is touched (no embedded server is started), not after a run whose
    every model call fails with "Connection error"."""
    if env is not None:
        monkeypatch.setenv("TEAMCTL_API_BASE", env)

    result = CliRunner().invoke(main, ["run", "x", "--workers", "0", *args])

    assert result.exit_code == 2
    assert result.stderr == (
        f"teamctl: {named} is not an http(s) URL; give the server's base "
        "URL, e.g. http://127.0.0.1:8000/v1\n"
    )
    assert not (tmp_path / "state" / "redis").exists()


def test_verbs_that_do_not_call_a_model_ignore_the_api_base(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked where it is used: `runs` (or a worker) never reads TEAMCTL_API_BASE."""
    monkeypatch.setenv("TEAMCTL_API_BASE", "not a url")
    result = CliRunner().invoke(main, ["runs", "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    assert redis.Redis.from_url(redis_url).keys("*") == []


@pytest.mark.parametrize("value", ["-1", "20", "low"])
def test_a_worker_niceness_outside_0_to_19_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKER_NICE", value)

    with pytest.raises(ConfigError) as failed:
        load_settings()

    assert str(failed.value).startswith(f"TEAMCTL_WORKER_NICE={value!r} in the environment: ")
    assert str(failed.value).endswith("set TEAMCTL_WORKER_NICE to a valid value or unset it")
