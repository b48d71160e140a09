"""Running a check as a user whom file modes bind: as root, without the capabilities that ignore
them (a worker usually runs as an ordinary user; this suite often runs as root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

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


def json_bound_by_modes(script: str, *args: str, temp_dir: str | None = None) -> Any:
    """Run the Python `script` with `args`, file modes binding (and TMPDIR `temp_dir`): what
    it printed, as JSON; it must exit 0."""
    env = {**os.environ, "TMPDIR": temp_dir} if temp_dir else None
    done = subprocess.run(
        [*as_bound_by_modes(), sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
