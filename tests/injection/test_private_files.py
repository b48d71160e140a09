"""What teamctl makes under the state dir is its owner's alone: dirs 0700, files 0600, parents it
creates included; an existing dir of ours is narrowed, another user's is left as it is."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from teamctl.shared.process.private_files import private_dir, private_opener
from teamctl.shared.teams.teammates import Teammate, TeammateStatus, team_workspace
from teamctl.worker.teams.teammate_workspace import ensure_workspace

NOBODY_UID = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_private_dir_creates_each_missing_parent_0700_and_leaves_existing_ones(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o755)
    made = private_dir(tmp_path / "state" / "workspaces" / "run-1")
    assert made.is_dir()
    assert [mode(p) for p in (made, made.parent, made.parent.parent)] == [0o700] * 3
    assert mode(tmp_path) == 0o755


def test_private_dir_narrows_an_existing_dir_of_ours(tmp_path: Path) -> None:
    old = tmp_path / "logs"
    old.mkdir(mode=0o755)
    old.chmod(0o755)  # as an older teamctl left it, whatever the umask
    assert private_dir(old) == old and mode(old) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a dir to another user")
def test_private_dir_leaves_another_users_dir_as_it_is(tmp_path: Path) -> None:
    theirs = tmp_path / "shared"
    theirs.mkdir()
    theirs.chmod(0o755)
    os.chown(theirs, NOBODY_UID, NOBODY_UID)
    private_dir(theirs)
    assert mode(theirs) == 0o755


def test_a_file_in_the_way_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a dir")
    with pytest.raises(FileExistsError) as raised:
        private_dir(tmp_path / "state")
    assert raised.value.filename == str(tmp_path / "state")
    assert (tmp_path / "state").read_text() == "not a dir"


def test_private_opener_creates_0600_and_narrows_an_older_file(tmp_path: Path) -> None:
    new, old = tmp_path / "new.log", tmp_path / "old.log"
    old.write_text("before\n")
    old.chmod(0o644)
    for path in (new, old):
        with open(path, "a", opener=private_opener) as file:
            file.write("line\n")
    assert mode(new) == 0o600 and new.read_text() == "line\n"
    assert mode(old) == 0o600 and old.read_text() == "before\nline\n"


def test_private_opener_does_not_follow_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("kept\n")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError), open(tmp_path / "link", "a", opener=private_opener):
        pass
    assert target.read_text() == "kept\n"


def test_a_teammates_workspace_is_made_private_with_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    teammate = Teammate(name="alice", status=TeammateStatus.IDLE, model="m")
    root = ensure_workspace(teammate, "core", state)
    assert root == team_workspace(state, "core") and root.is_dir()
    assert all(mode(p) == 0o700 for p in (root, root.parent, root.parent.parent, state))
