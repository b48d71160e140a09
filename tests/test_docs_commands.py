"""Shell blocks the docs mark runnable run as printed, on the embedded defaults and the offline
model, so a renamed command or flag breaks CI, not the reader. A block is marked by the line
`<!-- runnable ... -->` right above its fence; `RUN_ID` in it stands for the run its last
`teamctl run` started, and a line may start with `NAME=value` settings, as in a shell."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- runnable\b.*-->$")
RUN_STARTED = re.compile(r"teamctl: run (\S+) on ")
SETTING = re.compile(r"[A-Z_][A-Z0-9_]*=")


def runnable_blocks() -> list[tuple[str, list[str]]]:
    """(where, command lines) of every marked block in the README and docs/."""
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if MARKER.match(line.strip()):
                assert lines[index + 1].startswith("```sh"), f"{path}:{index + 1}: no sh block"
                end = lines.index("```", index + 2)
                commands = [c for c in lines[index + 2:end] if c.strip()]
                blocks.append((f"{path.relative_to(ROOT)}:{index + 1}", commands))
    return blocks


def test_the_readme_marks_its_quickstart_commands_runnable() -> None:
    where = [w for w, _ in runnable_blocks()]
    assert any(w.startswith("README.md:") for w in where)


@pytest.mark.parametrize(("where", "commands"), runnable_blocks())
def test_a_runnable_block_runs_as_printed(where: str, commands: list[str]) -> None:
    teamctl = str(Path(sys.executable).with_name("teamctl"))
    run_id = None
    try:
        for line in commands:
            argv = shlex.split(line, comments=True)
            settings = {}
            while argv and SETTING.match(argv[0]):
                name, value = argv.pop(0).split("=", 1)
                settings[name] = value
            assert argv and argv[0].endswith("teamctl"), \
                f"{where}: {line!r} is not a teamctl command"
            if "RUN_ID" in argv:
                assert run_id, f"{where}: {line!r} names RUN_ID before any run"
                argv = [run_id if arg == "RUN_ID" else arg for arg in argv]
            done = subprocess.run([teamctl, *argv[1:]], cwd=ROOT, capture_output=True,
                                  text=True, timeout=240, env={**os.environ, **settings})
            assert done.returncode == 0, f"{where}: {line!r} exited {done.returncode}: " \
                                         f"{done.stderr[-2000:]}"
            started = RUN_STARTED.search(done.stderr)
            run_id = started.group(1) if started else run_id
    finally:
        subprocess.run([teamctl, "workers", "stop"], capture_output=True, timeout=60)
        subprocess.run([teamctl, "redis", "stop"], capture_output=True, timeout=60)
