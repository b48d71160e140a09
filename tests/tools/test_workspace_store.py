"""A workspace kept in Redis: versioned saves that refuse the later of two writers, caps, fences,
and mirrors (local copies) that fetch, sync and report what they could not save."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import redis
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.keys import RunKeys
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus, team_workspace
from teamctl.shared.workspace.caps import PATH_RECORD_BYTES, FileCaps
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.held_dirs import remove_unheld
from teamctl.shared.workspace.kept_copy import hold, release
from teamctl.shared.workspace.mirror import WorkspaceMirror, syncable
from teamctl.shared.workspace.redis_files import (
    DELETED_KEEP_MS,
    SaveVerdict,
    WorkspaceFiles,
    choose_store,
)
from teamctl.shared.workspace.tools import add_workspace_tools

from tests.support.file_modes import json_bound_by_modes, modes_bind
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.slowlog import (
    NOISE_CEILING_MS,
    script_shas,
    slow_scripts_ms,
    slowlog_at_the_rule,
)
from tests.support.teams import spawn
from tests.support.waiting import wait_until


@pytest.fixture
def files(conn: redis.Redis, run_id: str) -> WorkspaceFiles:
    return WorkspaceFiles(
        conn,
        RunKeys(run_id),
        FileCaps(file_max_bytes=100, workspace_max_bytes=4 * PATH_RECORD_BYTES),
    )


def test_the_later_of_two_writers_who_saw_one_version_is_refused(files: WorkspaceFiles) -> None:
    assert files.save("notes.md", 0, b"first").verdict is SaveVerdict.SAVED
    assert files.save("notes.md", 1, b"alice").version == 2
    refused = files.save("notes.md", 1, b"bob")  # bob saw version 1 too
    assert (refused.verdict, refused.version) == (SaveVerdict.CONFLICT, 2)
    assert files.contents(["notes.md"]) == {"notes.md": b"alice"}
    assert files.save("notes.md", 2, None).verdict is SaveVerdict.SAVED  # deleted at version 3
    assert files.save("notes.md", 2, b"late").verdict is SaveVerdict.CONFLICT
    assert files.contents(["notes.md"]) == {}
    assert files.versions() == {"notes.md": 3}
    # Refused content and replaced content are gone; nothing is left for a deleted file.
    assert files.conn.keys(f"{files.keys.base}:blob:*") == []


def test_a_save_moves_pointers_only_so_a_big_file_never_blocks_redis(
    conn: redis.Redis, run_id: str
) -> None:
    files = WorkspaceFiles(conn, RunKeys(run_id), FileCaps(16 << 20, 64 << 20))
    with slowlog_at_the_rule(conn):
        assert files.save("big.bin", 0, b"x" * (16 << 20)).verdict is SaveVerdict.SAVED
        # Content copied through the script took 42 ms here (64 MiB: 180 ms); a pointer move
        # is ~0.1 ms, above the ceiling only if the host descheduled Redis mid-script.
        assert all(ms < NOISE_CEILING_MS for ms in slow_scripts_ms(conn, script_shas("file_save")))
    assert len(files.contents(["big.bin"])["big.bin"]) == 16 << 20


def test_binary_content_and_odd_names_round_trip(files: WorkspaceFiles) -> None:
    data = bytes(range(100))
    assert files.save("dir/ünï code.bin", 0, data).verdict is SaveVerdict.SAVED
    assert files.contents(["dir/ünï code.bin"]) == {"dir/ünï code.bin": data}


def test_mirrors_share_files_and_report_a_conflicting_change(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    alice = WorkspaceMirror.open(WorkspaceFiles(conn, keys))
    bob = WorkspaceMirror.open(WorkspaceFiles(conn, keys))
    try:
        alice_tools, bob_tools = toolbox(alice), toolbox(bob)
        assert '"ok": true' in alice_tools.call(
            "write_file", json.dumps({"path": "plan/draft.md", "content": "step 1\n"})
        )
        assert read(bob_tools, "plan/draft.md") == "step 1\n"
        assert '"bytes"' in bob_tools.call(
            "edit_file",
            json.dumps({"path": "plan/draft.md", "oldText": "step 1", "newText": "step 1 (bob)"}),
        )
        assert read(alice_tools, "plan/draft.md") == "step 1 (bob)\n"
        # Both change the file without seeing the other's change: the later save is refused.
        (alice.root / "plan/draft.md").write_text("alice's version\n")
        (bob.root / "plan/draft.md").write_text("bob's version\n")
        assert alice.push() == []
        problems = bob.push()
        assert len(problems) == 1 and "another member saved version 3 first" in problems[0]
        assert (bob.root / "plan/draft.md").read_text() == "alice's version\n"
        # A deletion travels too.
        (alice.root / "plan/draft.md").unlink()
        assert alice.push() == []
        bob.pull()
        assert not (bob.root / "plan/draft.md").exists()
    finally:
        alice.close()
        bob.close()
    assert not alice.root.exists()


def test_a_tool_whose_change_is_refused_answers_with_an_error(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, keys, FileCaps(file_max_bytes=10)))
    try:
        tools = toolbox(mirror)
        result = tools.call("write_file", json.dumps({"path": "long.txt", "content": "x" * 11}))
        assert result.startswith("TOOL_ERROR") and "WorkspaceNotSaved" in result
        assert "workspace_file_max_bytes" in result
        assert WorkspaceFiles(conn, keys).versions() == {}
    finally:
        mirror.close()


def test_what_programs_run_from_stays_on_its_host(conn: redis.Redis, run_id: str) -> None:
    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, RunKeys(run_id)))
    try:
        (mirror.root / ".git").mkdir()
        (mirror.root / ".git" / "config").write_text("[core]\n")
        (mirror.root / ".npmrc").write_text("x\n")
        (mirror.root / "kept.txt").write_text("y\n")
        (mirror.root / "link").symlink_to("/etc/passwd")
        assert mirror.push() == []
        assert WorkspaceFiles(conn, RunKeys(run_id)).versions() == {"kept.txt": 1}
    finally:
        mirror.close()
    assert not syncable("../x") and not syncable("/abs") and not syncable("a/.GIT/hooks")


@pytest.mark.parametrize(
    ("setting", "url", "store"),
    [
        ("auto", "unix:///tmp/teamctl/redis.sock?db=0", "local"),
        # A loopback URL says how this host reaches Redis, not that no other host does.
        ("auto", "redis://127.0.0.1:6379/0", "redis"),
        ("auto", "redis://localhost:6379/0", "redis"),
        ("auto", "redis://[::1]:6379/0", "redis"),
        ("auto", "redis://redis:6379/0", "redis"),
        ("auto", "rediss://10.0.0.5:6380/0", "redis"),
        ("auto", "redis://[::1", "redis"),
        ("local", "redis://redis:6379/0", "local"),
        ("redis", "redis://127.0.0.1:6379/0", "redis"),
    ],
)
def test_auto_keeps_files_on_disk_only_when_no_other_host_reaches_redis(
    setting: str, url: str, store: str
) -> None:
    assert choose_store(setting, url) == store  # type: ignore[arg-type]


def toolbox(mirror: WorkspaceMirror) -> Toolbox:
    tools = Toolbox()
    add_workspace_tools(tools, Workspace(mirror.root), ["read_file", "write_file", "edit_file"])
    mirror.guard(tools, tools.names)
    return tools


def read(tools: Toolbox, path: str) -> str:
    content: str = json.loads(tools.call("read_file", json.dumps({"path": path})))["content"]
    return content


def test_teammates_share_a_workspace_kept_in_redis(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "redis")  # read by the spawns below
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("write_file", {"path": "notes.md", "content": "from alice\n"})]), "wrote"],
    )
    bob = llm.script(
        f"bob-{team}",
        [
            ToolCalls([("read_file", {"path": "notes.md"})]),
            ToolCalls(
                [
                    (
                        "edit_file",
                        {"path": "notes.md", "oldText": "alice", "newText": "alice and bob"},
                    )
                ]
            ),
            "edited",
        ],
    )
    store = TeamStore(wconn, team)
    assert spawn(workers, team, "alice", alice, llm.api_base, "--tool", "write_file").exit_code == 0
    wait_until(lambda: store.get("alice").status is TeammateStatus.IDLE, message="alice's turn")
    assert (
        spawn(
            workers, team, "bob", bob, llm.api_base, "--tool", "read_file", "--tool", "edit_file"
        ).exit_code
        == 0
    )
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, message="bob's turn")
    assert store.meta().workspace_store == "redis"
    assert "from alice" in llm.requests[f"bob-{team}"][1]["messages"][-1]["content"]
    files = WorkspaceFiles(wconn, store.keys)
    assert files.contents(["notes.md"]) == {"notes.md": b"from alice and bob\n"}
    assert files.versions() == {"notes.md": 2}
    assert not (team_workspace(tmp_path / "state", team) / "notes.md").exists()


def test_only_a_file_really_gone_is_deleted_from_the_shared_workspace(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, keys))
    try:
        for name in ("linked.txt", "swapped.txt", "gone.txt"):
            (mirror.root / name).write_text(f"{name}\n")
        assert mirror.push() == []
        os.link(mirror.root / "linked.txt", mirror.root / "second-name.txt")
        (mirror.root / "swapped.txt").unlink()
        (mirror.root / "swapped.txt").symlink_to("/etc/hostname")
        (mirror.root / "gone.txt").unlink()
        problems = mirror.push()
        assert problems == [
            "linked.txt was not saved: it has 2 hard links, and a hard-linked file is not "
            "copied between hosts",
            "swapped.txt was not saved: it is a symlink now, and symlinks are not copied "
            "between hosts",
        ]
        assert mirror.push() == []  # said once, while the files stay as they are
        assert WorkspaceFiles(conn, keys).contents(["linked.txt", "swapped.txt", "gone.txt"]) == {
            "linked.txt": b"linked.txt\n",
            "swapped.txt": b"swapped.txt\n",
        }
    finally:
        mirror.close()


def test_a_conflicting_version_that_cannot_be_put_here_is_not_reported_again(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    other = WorkspaceFiles(conn, keys)
    assert other.save("a/b.txt", 0, b"theirs v1").verdict is SaveVerdict.SAVED
    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, keys))
    try:
        (mirror.root / "a" / "b.txt").write_text("mine")
        assert other.save("a/b.txt", 1, b"theirs v2").verdict is SaveVerdict.SAVED
        problems = mirror.push()
        assert len(problems) == 1 and "version 2 first, which is now" in problems[0]
        assert (mirror.root / "a" / "b.txt").read_bytes() == b"theirs v2"
        assert mirror.push() == []  # in sync: no loop of conflicts
    finally:
        mirror.close()


def test_content_whose_upload_expired_is_not_adopted(conn: redis.Redis, run_id: str) -> None:
    keys = RunKeys(run_id)
    files = WorkspaceFiles(conn, keys)
    reply = files.scripts["file_save"](
        keys=[
            keys.files,
            keys.file_versions,
            keys.files_info,
            keys.files_info,
            keys.file_blob("0" * 32),
            keys.files_info,
            keys.file_deletions,
        ],
        args=[
            b"f",
            0,
            "put",
            "0" * 32,
            "",
            100,
            10_000,
            10,
            "none",
            "",
            PATH_RECORD_BYTES,
            DELETED_KEEP_MS,
        ],
    )
    assert reply[0] == b"expired"
    assert files.versions() == {}


def test_a_mirror_that_cannot_fetch_leaves_no_directory(
    conn: redis.Redis, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    files = WorkspaceFiles(conn, RunKeys(run_id))
    files.conn.hset(files.keys.files_info, "rev", "not a number")
    with pytest.raises(ValueError):
        WorkspaceMirror.open(files)
    assert list(tmp_path.iterdir()) == []


def test_a_kept_directory_starts_each_mirror_from_the_shared_files_alone(
    conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """A worker copies a workspace into one directory per run, for its warm MCP servers: what
    an attempt left there unsaved (it died) is neither kept nor saved by the next, and closing
    empties the directory (links removed, never followed) but leaves it: a server works there."""
    keys = RunKeys(run_id)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's")
    first = WorkspaceMirror.open(WorkspaceFiles(conn, keys), tmp_path / "kept")
    first.workspace.write_bytes("shared.md", b"saved")
    assert first.push() == []
    (first.root / "unsaved.md").write_bytes(b"left by an attempt that died")
    (first.root / "sub").mkdir()
    (first.root / "sub" / "deep.md").write_bytes(b"unsaved too")
    (first.root / "sub").chmod(0o555)  # as a Go or npm module cache leaves its directories
    (first.root / "link").symlink_to(outside)
    (first.root / "dirlink").symlink_to(tmp_path)

    second = WorkspaceMirror.open(WorkspaceFiles(conn, keys), tmp_path / "kept")

    assert second.root == first.root
    assert sorted(p.name for p in second.root.iterdir()) == ["shared.md"]
    assert second.push() == []
    assert WorkspaceFiles(conn, keys).versions() == {"shared.md": 1}
    second.close()
    assert second.root.is_dir() and list(second.root.iterdir()) == []
    assert oct(second.root.stat().st_mode & 0o777) == "0o700"
    assert outside.read_text() == "not the workspace's"


def test_a_kept_directory_is_removed_only_once_no_mirror_holds_it(
    conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """The worker's MCP keeper removes a run's directory when the run ends, but never under an
    attempt still running there: it tries again later."""
    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, RunKeys(run_id)), tmp_path / "kept")
    assert mirror.kept

    assert not remove_unheld(mirror.root)
    assert mirror.root.is_dir()
    mirror.close()
    assert remove_unheld(mirror.root)
    assert not mirror.root.exists()


def test_a_kept_directory_that_is_a_link_is_not_used_nor_followed(
    conn: redis.Redis, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something that replaced the run's directory by a link (a `bash` may write beside its
    copy) gets nothing emptied or removed where the link points: the attempt takes a private
    copy, and the keeper removes the link itself."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    link = tmp_path / "kept"
    link.symlink_to(elsewhere)

    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, RunKeys(run_id)), link)

    assert not mirror.kept and mirror.root.parent == tmp_path / "tmp"
    mirror.close()
    assert remove_unheld(link)
    assert not link.is_symlink()
    assert (elsewhere / "precious.txt").read_text() == "keep me"


def test_a_held_copy_swapped_for_a_link_is_not_emptied_through_it(tmp_path: Path) -> None:
    """A tool that moves the held copy away and puts a link in its place (before the attempt
    releases it) gets nothing emptied where the link points; the keeper then removes the link."""
    root, moved, elsewhere = tmp_path / "kept", tmp_path / "moved", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    fd = hold(root)
    assert fd is not None
    os.rename(root, moved)
    root.symlink_to(elsewhere)

    release(fd, root)

    assert root.is_symlink()
    assert (elsewhere / "precious.txt").read_text() == "keep me"
    assert remove_unheld(root)
    assert not os.path.lexists(root)
    assert (elsewhere / "precious.txt").read_text() == "keep me"


CLOSED_UP = """
import json, os, sys
from pathlib import Path
from teamctl.shared.workspace import kept_copy
root = Path(sys.argv[1])
fd = kept_copy.hold(root)
for name, mode in (("hidden", 0o300), ("cache", 0o555), ("locked", 0o000)):
    (root / name / "deep").mkdir(parents=True)
    (root / name / "deep" / "file").write_text("left")
    os.chmod(root / name, mode)
os.chmod(root, 0o500)  # the copy itself made read-only
kept_copy.release(fd, root)
emptied = sorted(os.listdir(root))
again = kept_copy.hold(root)
print(json.dumps({"held": fd is not None, "left": emptied, "again": again is not None}))
"""


@modes_bind
def test_emptying_a_kept_directory_opens_up_what_a_tool_closed_and_never_raises(
    tmp_path: Path,
) -> None:
    """A tool may leave directories their owner cannot list or write (`chmod 0300`, a module
    cache's 0555, 0000) and make the copy itself read-only: its release empties all of it, and
    the next attempt holds it again, instead of an error replacing the attempt's outcome."""
    outcome = json_bound_by_modes(CLOSED_UP, str(tmp_path / "kept"))
    assert outcome == {"held": True, "left": [], "again": True}


PRIVATE_COPY_CLOSED_UP = """
import json, os, sys
from pathlib import Path
import redis
from teamctl.shared.keys import RunKeys
from teamctl.shared.workspace.mirror import WorkspaceMirror
from teamctl.shared.workspace.redis_files import WorkspaceFiles
files = WorkspaceFiles(redis.Redis.from_url(sys.argv[1]), RunKeys(sys.argv[2]))
mirror = WorkspaceMirror.open(files)
for name, mode in (("hidden", 0o300), ("cache", 0o555)):
    (mirror.root / name / "deep").mkdir(parents=True)
    os.chmod(mirror.root / name, mode)
mirror.close()
print(json.dumps({"kept": mirror.kept, "left": os.path.lexists(mirror.root)}))
"""


@modes_bind
def test_a_private_copy_goes_with_what_a_tool_closed_up(
    redis_url: str, run_id: str, tmp_path: Path
) -> None:
    """An attempt's own copy (no keeper) is removed as it closes, directories a tool made
    unlistable or read-only included, as a user whom modes bind."""
    os.chmod(tmp_path, 0o777)  # reachable by the unprivileged run
    outcome = json_bound_by_modes(PRIVATE_COPY_CLOSED_UP, redis_url, run_id, temp_dir=str(tmp_path))
    assert outcome == {"kept": False, "left": False}
