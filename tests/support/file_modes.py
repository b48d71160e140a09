"""Running a check as a user whom file modes bind: as root, without the capabilities that ignore
them (a worker usually runs as an ordinary user; this suite often runs as root)."""

from __future__ import annotations

import os
import shutil

import pytest

WITHOUT_OVERRIDE = [
    "setpriv",
    "--bounding-set",
    "-dac_override,-dac_read_search",
    "--inh-caps",
    "-dac_override,-dac_read_search",
]
"""Run as root without the capabilities that ignore file modes, so modes bind as for any user."""

modes_bind = pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="root ignores file modes, and setpriv is not here to drop that",
)
"""Skip a test that needs modes to bind where they cannot be made to."""


def as_bound_by_modes() -> list[str]:
    """The prefix of a command that runs it with file modes binding (none for a plain user)."""
    return WITHOUT_OVERRIDE if os.geteuid() == 0 else []
