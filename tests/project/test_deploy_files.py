"""The deployed stack's files read as the README and docs/guides/deploy.md describe them: there is
no Docker daemon in CI to run `docker compose config`, so the compose file's shape, the image's
install and the compose commands the docs print are checked here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DOC = ROOT / "docs" / "guides" / "deploy.md"
TEAMCTL_SERVICES = ("worker", "coordinator")
"""The services that run the teamctl image."""
HEALTH_CHECK = ["CMD", "python", "-m", "teamctl.worker.health", "members"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def test_the_services_the_docs_describe(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"redis", "worker", "coordinator"}
    assert services["coordinator"]["profiles"] == ["cli"]  # `up` starts redis and workers only


def test_redis_keeps_an_append_only_file_and_never_evicts(
    services: dict[str, dict[str, Any]],
) -> None:
    command = services["redis"]["command"]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--maxmemory-policy"] == "noeviction"
    assert any(volume.endswith(":/data") for volume in services["redis"]["volumes"])


@pytest.mark.parametrize("name", TEAMCTL_SERVICES)
def test_teamctl_services_share_image_redis_workspace_store_and_env_file(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    service = services[name]
    assert (service["image"], service["build"]) == ("teamctl:local", ".")
    assert service["env_file"] == ".env"
    assert service["environment"]["REDIS_URL"] == "redis://redis:6379/0"
    assert service["environment"]["TEAMCTL_WORKSPACE_STORE"] == "redis"
    assert service["init"] is True
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"


def test_workers_serve_members_replicated_restarted_and_health_checked(
    services: dict[str, dict[str, Any]],
) -> None:
    worker = services["worker"]
    assert worker["command"] == ["teamctl", "worker", "members"]
    assert worker["deploy"]["replicas"] >= 2
    assert worker["restart"] == "unless-stopped"
    assert worker["healthcheck"]["test"] == HEALTH_CHECK


def test_the_env_file_is_an_example_and_stays_out_of_git_and_the_image() -> None:
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    settings = dict(
        line.split("=", 1) for line in example.splitlines() if line and not line.startswith("#")
    )
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TEAMCTL_MODEL"} <= set(settings)
    assert set(settings.values()) == {""}  # an example holds no secret
    for ignore in (".gitignore", ".dockerignore"):
        assert ".env" in (ROOT / ignore).read_text(encoding="utf-8").splitlines(), ignore


def test_the_image_installs_the_hashed_lock_before_the_sources() -> None:
    steps = [
        line
        for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    lock = next(i for i, s in enumerate(steps) if "-r requirements/runtime.txt" in s)
    assert "--require-hashes" in steps[lock]
    sources = steps.index("COPY . .")
    assert steps[lock - 1].startswith("COPY requirements/runtime.txt") and lock < sources
    assert any("pip install" in s and "--no-deps" in s for s in steps[sources:])
    users = [s.split()[1] for s in steps if s.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")


def compose_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every `docker compose ...` line in the README, the deploy guide and
    compose.yaml's own header."""
    found = []
    for path in (ROOT / "README.md", DEPLOY_DOC, ROOT / "compose.yaml"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            at = line.find("docker compose ")
            if at >= 0 and not line[:at].strip("#` "):
                text = line[at:].split("`")[0]
                found.append((f"{path.name}:{number}", shlex.split(text, comments=True)))
    return found


OPTIONS_WITH_VALUES = {"--scale", "-e", "--env", "-u", "--user", "-w", "--workdir"}
"""Options after the verb that take a value (`-f` there is `logs --follow`, not `--file`)."""
ONE_SERVICE_VERBS = {"run", "exec"}
"""Verbs whose first argument is the one service; the rest is the command run in it."""


def named_services(argv: list[str]) -> list[str]:
    """The services a `docker compose VERB ...` command names (`--scale NAME=N` included)."""
    verb, rest = argv[2], argv[3:]
    names, positional = [], []
    while rest:
        arg = rest.pop(0)
        if arg in OPTIONS_WITH_VALUES:
            value = rest.pop(0)
            if arg == "--scale":
                names.append(value.split("=", 1)[0])
        elif not arg.startswith("-"):
            positional.append(arg)
            if verb in ONE_SERVICE_VERBS:
                break
    return names + positional


def test_the_docs_print_compose_commands() -> None:
    where = {w.split(":")[0] for w, _ in compose_commands()}
    assert {"README.md", "deploy.md", "compose.yaml"} <= where


@pytest.mark.parametrize(("where", "argv"), compose_commands())
def test_a_printed_compose_command_names_services_that_exist(
    services: dict[str, dict[str, Any]], where: str, argv: list[str]
) -> None:
    assert argv[:2] == ["docker", "compose"]
    unknown = set(named_services(argv)) - set(services)
    assert not unknown, f"{where}: {shlex.join(argv)} names {unknown}, not in compose.yaml"


def test_a_coordinator_run_uses_the_services_workers(services: dict[str, dict[str, Any]]) -> None:
    """`teamctl run` in the coordinator starts no workers of its own: the worker service's are
    the ones with the stack's settings."""
    runs = [
        argv
        for _, argv in compose_commands()
        if argv[2] == "run" and "teamctl" in argv and argv[argv.index("teamctl") + 1] == "run"
    ]
    assert runs
    assert all(argv[argv.index("--workers") + 1] == "0" for argv in runs if "--workers" in argv)
    assert all("--workers" in argv for argv in runs)


def test_the_deploy_guide_states_what_compose_sets() -> None:
    guide = DEPLOY_DOC.read_text(encoding="utf-8")
    for text in (
        "TEAMCTL_WORKSPACE_STORE: redis",
        "noeviction",
        "restart: unless-stopped",
        " ".join(HEALTH_CHECK[1:]),
        "teamctl worker members",
        "FROM teamctl:local",
    ):
        assert text in guide, text
    assert re.search(
        r"^\s+- .*: guides/deploy\.md$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE
    )
