"""Reading the lock files scripts/lock writes (requirements/*.txt): their requirement lines and
each pinned package's version."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent.parent
RUNTIME = ROOT / "requirements" / "runtime.txt"
DEV = ROOT / "requirements" / "dev.txt"


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
