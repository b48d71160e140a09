"""The lock files (requirements/, written by scripts/lock) against pyproject.toml, read offline:
every declared requirement pinned within its bounds, every pin hashed, the image's pins the same
as the dev ones, and nothing of this machine's pip configuration written into them."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "requirements" / "runtime.txt"
DEV = ROOT / "requirements" / "dev.txt"
WITHDRAWN_LITELLM = [Version("1.82.7"), Version("1.82.8")]
"""Malicious uploads, withdrawn from PyPI: never pinned, and excluded by pyproject's bounds."""


def logical_lines(path: Path) -> list[str]:
    """The lock's requirement lines, each with its continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    lines = (line.split(" #", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def pins(path: Path) -> dict[NormalizedName, Version]:
    """Each pinned package's version."""
    found = {}
    for line in logical_lines(path):
        requirement = Requirement(line.split(" --hash=", 1)[0])
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{path.name}: {line[:80]!r} is not a pin"
        found[canonicalize_name(requirement.name)] = Version(spec.version)
    return found


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


@pytest.mark.parametrize(("lock", "extras"), [(RUNTIME, ()), (DEV, ("test", "docs"))],
                         ids=["runtime", "dev"])
def test_every_declared_requirement_is_pinned_within_its_bounds(
        lock: Path, extras: tuple[str, ...]) -> None:
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


def test_the_image_pins_are_the_dev_pins() -> None:
    runtime, dev = pins(RUNTIME), pins(DEV)
    assert {name: (version, dev.get(name)) for name, version in runtime.items()
            if dev.get(name) != version} == {}


@pytest.mark.parametrize("lock", [RUNTIME, DEV], ids=["runtime", "dev"])
def test_no_local_index_or_path_in_the_lock(lock: Path) -> None:
    """Where this machine's pip looks (its config: local mirrors, a wheel folder) is not the lock's
    business: an install elsewhere must not look there."""
    text = lock.read_text(encoding="utf-8")
    assert not re.search(r"file://|/opt/|^--(extra-)?index-url|^--find-links", text, re.MULTILINE)


def test_setup_installs_the_dev_lock_with_hashes() -> None:
    setup = (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    assert "--require-hashes -r requirements/dev.txt" in setup
    assert "--no-deps" in setup
