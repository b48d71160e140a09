"""The lock files (requirements/, written by scripts/lock) against pyproject.toml, read offline:
every declared requirement pinned within its bounds (the runtime lock's with the dashboard's
extra), every pin hashed, the runtime pins the same as the dev ones, and nothing of this machine's
pip configuration written into them."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.support.locks import DEV, ROOT, RUNTIME, logical_lines, pins

WITHDRAWN_LITELLM = [Version("1.82.7"), Version("1.82.8")]
"""Malicious uploads, withdrawn from PyPI: never pinned, and excluded by pyproject's bounds."""


def declared(*extras: str) -> list[Requirement]:
    """pyproject's [project] dependencies, and those of the named extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def extras_requirements(requirement: Requirement) -> list[Requirement]:
    """What `requirement`'s extras add (`hiredis` for `redis[hiredis]`), read from the installed
    distribution's metadata (scripts/setup installs the dev pins)."""
    found = []
    for line in importlib.metadata.requires(requirement.name) or []:
        extra_requirement = Requirement(line)
        marker = extra_requirement.marker
        if marker and any(marker.evaluate({"extra": extra}) for extra in requirement.extras):
            extra_requirement.marker = None  # evaluated: `extra == ...` holds here
            found.append(extra_requirement)
    return found


def unpinned(requirements: list[Requirement], pinned: dict[NormalizedName, Version]) -> list[str]:
    """The requirements (their extras' included) without a pin inside their bounds."""
    problems = []
    for requirement in requirements:
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement} (pinned: {version})")
        problems += unpinned(extras_requirements(requirement), pinned)
    return problems


@pytest.mark.parametrize(
    ("lock", "extras"),
    [(RUNTIME, ("web",)), (DEV, ("test", "docs", "web"))],
    ids=["runtime", "dev"],
)
def test_every_declared_requirement_is_pinned_within_its_bounds(
    lock: Path, extras: tuple[str, ...]
) -> None:
    assert unpinned(declared(*extras), pins(lock)) == []


@pytest.mark.parametrize("lock", [RUNTIME, DEV], ids=["runtime", "dev"])
def test_every_pin_carries_its_hashes(lock: Path) -> None:
    lines = logical_lines(lock)
    assert lines
    assert [line[:80] for line in lines if "--hash=sha256:" not in line] == []


@pytest.mark.parametrize("lock", [RUNTIME, DEV], ids=["runtime", "dev"])
def test_no_withdrawn_litellm(lock: Path) -> None:
    assert pins(lock)[canonicalize_name("litellm")] not in WITHDRAWN_LITELLM
    (litellm,) = [r for r in declared() if r.name == "litellm"]
    assert not any(litellm.specifier.contains(v) for v in WITHDRAWN_LITELLM)


def test_the_runtime_pins_are_the_dev_pins() -> None:
    """The image, a .venv of scripts/install and one of scripts/setup run the same versions, and
    scripts/setup only adds to a .venv that scripts/install made."""
    runtime, dev = pins(RUNTIME), pins(DEV)
    assert {
        name: (version, dev.get(name))
        for name, version in runtime.items()
        if dev.get(name) != version
    } == {}


@pytest.mark.parametrize("lock", [RUNTIME, DEV], ids=["runtime", "dev"])
def test_no_local_index_or_path_in_the_lock(lock: Path) -> None:
    """Where this machine's pip looks (its config: local mirrors, a wheel folder) is not the lock's
    business: an install elsewhere must not look there."""
    text = lock.read_text(encoding="utf-8")
    assert not re.search(r"file://|/opt/|^--(extra-)?index-url|^--find-links", text, re.MULTILINE)


def test_install_puts_the_runtime_lock_with_hashes_and_setup_the_dev_one() -> None:
    """scripts/demo installs what a user runs (the runtime lock, the dashboard's extra in it),
    scripts/setup the developer's set, both through scripts/install."""
    scripts = ROOT / "scripts"
    install = (scripts / "install").read_text(encoding="utf-8")
    assert "lock=${1:-requirements/runtime.txt}" in install
    assert '--require-hashes -r "$lock"' in install
    assert "--no-deps" in install
    assert "\nscripts/install requirements/dev.txt\n" in (scripts / "setup").read_text(
        encoding="utf-8"
    )
    assert "\nscripts/install\n" in (scripts / "demo").read_text(encoding="utf-8")
