"""Shell blocks the docs mark runnable run as printed, on the embedded defaults and the offline
model, so a renamed command or flag breaks CI, not the reader. A block is marked by the line
`<!-- runnable ... -->` right above its fence; `RUN_ID` in it stands for the run its last
`teamctl run` started, and a line may start with `NAME=value` settings, as in a shell.

A line may read its input from `</dev/null`, as in a shell. A comment line `# in another shell`
(and whatever follows on it) leaves the command above it running, as a first terminal would: the
lines after it run once that command has said its run id and that the run waits on a person (its
plan awaits approval, or its budget is spent), or once it ended, and it must exit 0 by the
block's end. A `teamctl dashboard` line serves until Ctrl-C: the test opens the URL it prints (a
page must answer), then presses Ctrl-C (SIGINT), and it must stop with exit 130, as any command
Ctrl-C interrupts (docs/reference/exit-codes.md). Blocks run in a
folder of their own that links every entry of the checkout, so a file a block writes (a report)
lands there. A block marked `<!-- the file PATH of the checkout ... -->` is that file, line for
line (a team file the guide prints and a runnable block names)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- runnable\b.*-->$")
PRINTED_FILE = re.compile(r"^<!-- the file (\S+) of the checkout\b.*-->$")
RUN_STARTED = re.compile(r"teamctl: run (\S+) on ")
WAITS_ON_A_PERSON = re.compile(r"^teamctl: (plan awaits approval|run \S+ paused \(budget)", re.M)
DASHBOARD_URL = re.compile(r"^teamctl dashboard: (http://\S+)", re.M)
SETTING = re.compile(r"[A-Z_][A-Z0-9_]*=")
ANOTHER_SHELL = re.compile(r"^# in another shell\b")
COMMAND_TIMEOUT_S = 240


def runnable_blocks() -> list[tuple[str, list[str]]]:
    """(where, command lines) of every marked block in the README and docs/."""
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if MARKER.match(line.strip()):
                assert lines[index + 1].startswith("```sh"), f"{path}:{index + 1}: no sh block"
                end = lines.index("```", index + 2)
                commands = [c for c in lines[index + 2 : end] if c.strip()]
                blocks.append((f"{path.relative_to(ROOT)}:{index + 1}", commands))
    return blocks


def printed_files() -> list[tuple[str, str, list[str]]]:
    """(where, file, block lines) of every block the docs mark as a file of the checkout."""
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if found := PRINTED_FILE.match(line.strip()):
                assert lines[index + 1].startswith("```"), f"{path}:{index + 1}: no block"
                end = lines.index("```", index + 2)
                blocks.append(
                    (
                        f"{path.relative_to(ROOT)}:{index + 1}",
                        found.group(1),
                        lines[index + 2 : end],
                    )
                )
    return blocks


def test_the_readme_marks_its_quickstart_commands_runnable() -> None:
    where = [w for w, _ in runnable_blocks()]
    assert any(w.startswith("README.md:") for w in where)


@pytest.mark.parametrize(("where", "name", "printed"), printed_files())
def test_a_printed_file_is_the_checkout_s(where: str, name: str, printed: list[str]) -> None:
    """What a reader copies is what a runnable block runs."""
    assert (ROOT / name).read_text(encoding="utf-8").splitlines() == printed, where


@dataclass
class Line:
    """One command line of a block, read as a shell reads it."""

    argv: list[str]
    settings: dict[str, str]


def parsed(where: str, line: str, run_id: str | None) -> Line:
    """The line's teamctl arguments and its `NAME=value` settings; `</dev/null` is dropped
    (every command here reads nothing)."""
    argv = shlex.split(line, comments=True)
    settings = {}
    while argv and SETTING.match(argv[0]):
        name, value = argv.pop(0).split("=", 1)
        settings[name] = value
    argv = [arg for arg in argv if arg != "</dev/null"]
    assert argv and argv[0].endswith("teamctl"), f"{where}: {line!r} is not a teamctl command"
    if "RUN_ID" in argv:
        assert run_id, f"{where}: {line!r} names RUN_ID before any run"
        argv = [run_id if arg == "RUN_ID" else arg for arg in argv]
    return Line(argv[1:], settings)


@dataclass
class Background:
    """A command the block left running, its output in files."""

    line: str
    process: subprocess.Popen[bytes]
    stderr: Path

    def said(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")


def start(argv: list[str], env: dict[str, str], cwd: Path, line: str) -> Background:
    """`argv` in a session of its own, stdout and stderr to files beside the block."""
    index = len(list(cwd.glob("background-*.err")))
    stderr = cwd / f"background-{index}.err"
    with stderr.open("wb") as err, (cwd / f"background-{index}.out").open("wb") as out:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    return Background(line, process, stderr)


def run_in_background(
    where: str, argv: list[str], env: dict[str, str], cwd: Path, line: str
) -> Background:
    """Start a line left running; return once its run waits on a person, or it ended."""
    started = start(argv, env, cwd, line)
    wait_until(
        lambda: (
            started.process.poll() is not None
            or (RUN_STARTED.search(started.said()) and WAITS_ON_A_PERSON.search(started.said()))
        ),
        COMMAND_TIMEOUT_S,
        interval_s=0.1,
        message=f"{where}: {line!r} to say that its run waits on a person",
    )
    return started


def serve_and_stop(where: str, argv: list[str], env: dict[str, str], cwd: Path, line: str) -> None:
    """A `teamctl dashboard` line: its printed URL answers a page, and Ctrl-C stops it (130)."""
    served = start(argv, env, cwd, line)
    try:
        found = wait_until(
            lambda: served.process.poll() is not None or DASHBOARD_URL.search(served.said()),
            60,
            interval_s=0.1,
            message=f"{where}: {line!r} to print its URL",
        )
        assert isinstance(found, re.Match), f"{where}: {line!r} exited: {served.said()[-2000:]}"
        # The printed URL sets the cookie and redirects to the page, as in a browser.
        page = httpx.get(found.group(1), follow_redirects=True, timeout=30)
        assert page.status_code == 200, f"{where}: {line!r}: {found.group(1)} {page.status_code}"
    finally:
        if served.process.poll() is None:
            os.kill(served.process.pid, signal.SIGINT)
    assert served.process.wait(30) == 130, f"{where}: {line!r}: {served.said()[-2000:]}"


def checkout_view(into: Path) -> Path:
    """A folder whose entries link to the checkout's: the block's relative paths (`.venv/`,
    `examples/`) resolve as in the checkout, and what it writes stays here."""
    into.mkdir()
    for entry in ROOT.iterdir():
        (into / entry.name).symlink_to(entry)
    return into


@pytest.mark.parametrize(("where", "commands"), runnable_blocks())
def test_a_runnable_block_runs_as_printed(where: str, commands: list[str], tmp_path: Path) -> None:
    teamctl = str(Path(sys.executable).with_name("teamctl"))
    cwd = checkout_view(tmp_path / "checkout")
    run_id = None
    left_running: list[Background] = []
    try:
        for index, line in enumerate(commands):
            if ANOTHER_SHELL.match(line):
                continue
            command = parsed(where, line, run_id)
            argv, env = [teamctl, *command.argv], {**os.environ, **command.settings}
            if command.argv[:1] == ["dashboard"]:
                serve_and_stop(where, argv, env, cwd, line)
                continue
            if ANOTHER_SHELL.match(commands[index + 1] if index + 1 < len(commands) else ""):
                left_running.append(run_in_background(where, argv, env, cwd, line))
                said = left_running[-1].said()
            else:
                done = subprocess.run(
                    argv,
                    cwd=cwd,
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    timeout=COMMAND_TIMEOUT_S,
                    env=env,
                )
                assert done.returncode == 0, (
                    f"{where}: {line!r} exited {done.returncode}: {done.stderr[-2000:]}"
                )
                said = done.stderr
            started = RUN_STARTED.search(said)
            run_id = started.group(1) if started else run_id
        for running in left_running:
            code = running.process.wait(COMMAND_TIMEOUT_S)
            assert code == 0, f"{where}: {running.line!r} exited {code}: {running.said()[-2000:]}"
    finally:
        for running in left_running:
            if running.process.poll() is None:
                os.killpg(running.process.pid, signal.SIGKILL)
                running.process.wait(30)
        subprocess.run([teamctl, "workers", "stop"], capture_output=True, timeout=60)
        subprocess.run([teamctl, "redis", "stop"], capture_output=True, timeout=60)
