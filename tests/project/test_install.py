"""scripts/demo's install step (scripts/install) in a fresh checkout installs what a user runs,
the runtime lock and teamctl, and nothing else: no test or docs tool in .venv, and no apt-get,
even as root on a machine without chromium (which scripts/setup would install from apt)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.support.locks import ROOT, RUNTIME, pins

pytestmark = pytest.mark.installs

TEST_TOOLS = {"pytest", "mypy", "ruff", "playwright", "mkdocs", "mkdocs-material", "hypothesis"}
APT_SHIM = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
exit 100
"""
"""Stands for apt-get and apt: records the call, then fails as apt does without its lists."""
DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions()})))"
)


def fresh_checkout(into: Path) -> Path:
    """This tree's files as git sees them (tracked, and new ones not ignored), with no .venv:
    what a clone of the next commit holds, the scripts' mode bits kept."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a file deleted but not yet committed is left out
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def path_without_chromium(shims: Path, apt_log: Path) -> str:
    """A PATH of `shims`: apt-get and apt that only record their calls, then a link to every
    other program on this PATH except chromium, so a script that installs chromium where it is
    missing would call apt here."""
    shims.mkdir()
    for name in ("apt-get", "apt"):
        (shims / name).write_text(APT_SHIM.format(log=apt_log))
        (shims / name).chmod(0o755)
    for folder in os.environ["PATH"].split(os.pathsep):
        for program in Path(folder).glob("*") if Path(folder).is_dir() else []:
            target = shims / program.name
            if (
                not program.name.startswith("chromium")
                and not target.exists()
                and os.access(program, os.X_OK)
                and not program.is_dir()
            ):
                target.symlink_to(program.resolve())
    return str(shims)


def test_the_demo_install_step_puts_only_the_runtime_lock_and_never_calls_apt(
    tmp_path: Path,
) -> None:
    checkout = fresh_checkout(tmp_path / "teamctl")
    apt_log = tmp_path / "apt.log"
    path = path_without_chromium(tmp_path / "bin", apt_log)
    assert shutil.which("chromium", path=path) is None
    python = os.path.realpath(shutil.which("python3") or "python3")
    done = subprocess.run(
        [checkout / "scripts" / "install"],
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "PATH": path, "PYTHON": python},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not apt_log.exists(), apt_log.read_text()
    venv_python = checkout / ".venv" / "bin" / "python"
    listed = subprocess.run(
        [venv_python, "-c", DISTRIBUTIONS], capture_output=True, text=True, check=True, timeout=60
    )
    installed = {canonicalize_name(name) for name in json.loads(listed.stdout)}
    assert installed & TEST_TOOLS == set()
    assert installed == set(pins(RUNTIME)) | {"teamctl", "pip"}
    version = subprocess.run(
        [checkout / ".venv" / "bin" / "teamctl", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (version.returncode, version.stdout) == (0, "teamctl 0.1.0\n")
