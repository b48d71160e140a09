"""The private HOME of `bash` and MCP servers: removed with whatever a program left in it, and
swept by the worker when the process that held it was killed (a real RQ worker, real SIGKILLs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.held_dirs import remove_tree
from teamctl.shared.workspace.private_home import ORPHAN_MIN_AGE_S, remove_orphan_homes

from tests.support.file_modes import json_bound_by_modes, modes_bind
from tests.support.waiting import wait_until
from tests.support.workers import exited, warm_fork_worker

HOLDER = """
import os, sys, time
from pathlib import Path
from teamctl.shared.workspace.private_home import PrivateHome
home = PrivateHome.create(Path(sys.argv[1]))
(home.path / ".cache" / "mod").mkdir(parents=True)
(home.path / ".cache" / "mod" / "token").write_text("a program's secret")
os.chmod(home.path / ".cache" / "mod", 0o555)  # a module cache's read-only directory
print(home.path, flush=True)
time.sleep(600)
"""
"""Makes a home as a job would, fills it, says where, then waits to be killed."""


@contextmanager
def holders(count: int, temp_dir: Path, workspace: Path) -> Iterator[list[tuple[int, Path]]]:
    """`count` processes, each holding a private home in `temp_dir`: (pid, home) of each."""
    with ExitStack() as stack:
        found = []
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(workspace)],
                env={**os.environ, "TMPDIR": str(temp_dir)},
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.callback(_kill, process)
            assert process.stdout is not None
            found.append((process.pid, Path(process.stdout.readline().strip())))
        yield found


def _kill(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait(timeout=30)


def kill_and_reap(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: exited(pid), 30, message=f"process {pid} to die")


def age(path: Path, seconds: float) -> None:
    """Make `path` (a link itself, not what it names) look unchanged for `seconds`."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def test_a_killed_process_s_home_is_swept_and_a_held_or_new_one_is_not(tmp_path: Path) -> None:
    """Only a home nobody holds and older than ORPHAN_MIN_AGE_S goes, read-only parts included,
    as does a link a program put in place of one (never followed); a held one stays however
    old, a new orphan stays until it is old enough."""
    temp_dir, workspace = tmp_path / "tmp", tmp_path / "workspace"
    temp_dir.mkdir()
    workspace.mkdir()
    (workspace / "report.md").write_text("the member's work")
    with holders(4, temp_dir, workspace) as homes:
        (killed_pid, killed), (_, held), (new_pid, new_orphan), (linked_pid, linked) = homes
        for pid in (killed_pid, new_pid, linked_pid):
            kill_and_reap(pid)
        remove_tree(linked)
        linked.symlink_to(workspace)  # `rm -rf "$HOME"; ln -s "$PWD" "$HOME"`, then killed
        for home in (killed, held, linked):
            age(home, ORPHAN_MIN_AGE_S + 60)

        assert sorted(remove_orphan_homes(temp_dir)) == sorted([killed, linked])

        assert not os.path.lexists(linked)
        assert (workspace / "report.md").read_text() == "the member's work"
        assert not killed.exists()
        assert (held / ".cache" / "mod" / "token").read_text() == "a program's secret"
        assert new_orphan.exists()
        assert remove_orphan_homes(temp_dir, min_age_s=0) == [new_orphan]
        assert held.exists()


def test_a_worker_removes_what_its_host_s_killed_jobs_left_as_it_starts(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker sharing the jobs' TMPDIR sweeps it when it starts (then each maintenance
    interval), and says what it removed."""
    temp_dir, workspace = tmp_path / "tmp", tmp_path / "workspace"
    temp_dir.mkdir()
    workspace.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp_dir))
    log = tmp_path / "worker.log"
    with holders(2, temp_dir, workspace) as [(killed_pid, killed), (_, held)]:
        kill_and_reap(killed_pid)
        for home in (killed, held):
            age(home, ORPHAN_MIN_AGE_S + 60)
        with warm_fork_worker(redis_url, "private-home-sweep", log):
            wait_until(lambda: not killed.exists(), 30, message="the orphan home to go")
            assert held.exists()
    assert f"removed {killed}, left by a killed process" in log.read_text()


@modes_bind
def test_a_home_goes_with_what_a_program_made_read_only(tmp_path: Path) -> None:
    """`bash` in a home (a module cache's read-only directories, one its owner cannot list):
    the home is removed all the same when the call ends, as a user whom modes bind."""
    script = """
import json, os, sys
from pathlib import Path
from teamctl.shared.workspace.directory import Workspace
workspace = Workspace(Path(sys.argv[1]))
result = workspace.bash(
    "mkdir -p $HOME/go/pkg/mod/x $HOME/hidden/deep && touch $HOME/go/pkg/mod/x/f"
    " && chmod -R a-w $HOME/go && chmod 0300 $HOME/hidden && echo $HOME"
)
home = str(result["output"]).strip()
print(json.dumps({"home": home, "left": os.path.exists(home)}))
"""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chmod(tmp_path, 0o777)  # reachable by the unprivileged run
    outcome = json_bound_by_modes(script, str(workspace), temp_dir=str(tmp_path))
    assert outcome["home"].startswith(str(tmp_path)) and outcome["left"] is False


def test_a_link_put_in_place_of_the_home_is_removed_never_followed(tmp_path: Path) -> None:
    """A command that swaps its HOME for a link to the workspace (or anywhere) loses the link
    when the call ends; what the link named is untouched."""
    workspace = Workspace(tmp_path / "workspace")
    workspace.root.mkdir()
    (workspace.root / "report.md").write_text("the member's work")

    result = workspace.bash('rm -rf "$HOME" && ln -s "$PWD" "$HOME" && echo $HOME')

    home = Path(str(result["output"]).strip())
    assert not os.path.lexists(home)
    assert (workspace.root / "report.md").read_text() == "the member's work"


def test_an_mcp_hub_s_home_is_held_until_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep leaves a live hub's home alone, however old; closing the hub removes it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with McpHub(workspace, McpTimeouts(30, 30, 5)) as hub:
        assert hub.home.parent == tmp_path
        assert remove_orphan_homes(tmp_path, min_age_s=0) == []
        assert hub.home.is_dir()
    assert not hub.home.exists()


UNREADABLE_ORPHAN = """
import json, os, sys
from pathlib import Path
from teamctl.shared.workspace.private_home import PrivateHome, remove_orphan_homes
temp_dir = Path(sys.argv[1])
home = PrivateHome.create(Path(sys.argv[2]))
(home.path / "token").write_text("a program's secret")
os.chmod(home.path, 0o300)  # `chmod u-r $HOME`: its owner can no longer list it
os.close(home._fd)  # its process dies without removing it
print(json.dumps({"removed": [str(p) for p in remove_orphan_homes(temp_dir, min_age_s=0)],
                  "left": os.path.lexists(home.path), "home": str(home.path)}))
"""


@modes_bind
def test_an_orphan_home_its_process_made_unreadable_is_removed(tmp_path: Path) -> None:
    """A home whose process took its own right to list it, then died: the sweep gives the
    right back, removes it, and says so only once it is gone (as a user whom modes bind)."""
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    os.chmod(tmp_path, 0o777)  # reachable by the unprivileged run
    os.chmod(temp_dir, 0o777)
    outcome = json_bound_by_modes(
        UNREADABLE_ORPHAN, str(temp_dir), "/nowhere", temp_dir=str(temp_dir)
    )
    assert outcome["left"] is False
    assert outcome["removed"] == [outcome["home"]]
