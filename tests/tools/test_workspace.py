"""Workspace confinement: the Workspace itself, and the workspace tools in a member session."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import stat
import subprocess
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.errors import ToolFailed
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.workspace.directory import (
    BASH_ADDRESS_SPACE_BYTES,
    BASH_FILE_SIZE_BYTES,
    BASH_MORE_PROCESSES,
    Workspace,
    _limits_script,
    _user_task_count,
)
from teamctl.shared.workspace.tools import add_workspace_tools
from teamctl.worker.jobs import execute_task

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import tool_names, tool_results
from tests.support.runs import make_run
from tests.support.workers import exited

NOBODY_UID = 65534


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "inside.txt").write_text("hello")
    (root / "escape").symlink_to("/etc")
    (root / "passwd-link").symlink_to("/etc/passwd")
    return Workspace(root)


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "escape/passwd",
        "passwd-link",
        "sub/../../outside.txt",
        "..",
        "",
    ],
)
def test_paths_that_leave_the_workspace_are_refused(workspace: Workspace, path: str) -> None:
    with pytest.raises(ToolFailed):
        workspace.read(path)
    with pytest.raises(ToolFailed):
        workspace.write(path, "x")
    assert not (workspace.root.parent / "outside.txt").exists()


def test_paths_inside_the_workspace_work(workspace: Workspace) -> None:
    assert workspace.read("inside.txt") == "hello"
    assert workspace.read(str(workspace.root / "inside.txt")) == "hello"
    assert workspace.write("a/b/c.txt", "deep") == 4
    assert workspace.edit("a/b/c.txt", "deep", "deeper") == 6
    assert (workspace.root / "a/b/c.txt").read_text() == "deeper"
    assert workspace.list(".") == [
        "a/",
        "a/b/",
        "a/b/c.txt",
        "escape/",
        "inside.txt",
        "passwd-link",
    ]
    with pytest.raises(ToolFailed, match="occurs 0 times"):
        workspace.edit("a/b/c.txt", "missing", "x")


def test_bash_runs_in_the_workspace_with_a_timeout_and_an_output_cap(workspace: Workspace) -> None:
    result = workspace.bash("pwd; echo made > made.txt")
    assert result["exitCode"] == 0
    assert result["output"].strip() == str(workspace.root.resolve())
    assert (workspace.root / "made.txt").read_text() == "made\n"
    assert workspace.bash("yes | head -c 100000", limit_chars=100)["output"] == (
        "y\n" * 50 + "\n[output truncated: 99900 more characters]"
    )
    started = time.monotonic()
    with pytest.raises(ToolFailed, match="timed out after 0.3s"):
        workspace.bash("sleep 300", timeout_s=0.3)
    # The bound is the point (the command was killed, not waited for), so it is generous: far
    # from the 300 s the sleep would take, far above 0.3 s on a loaded machine.
    assert time.monotonic() - started < 60


def test_member_workspace_tools_write_inside_and_refuse_escapes(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "escape").symlink_to("/etc")
    model = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    ("write_file", {"path": "notes/plan.md", "content": "step one"}),
                    ("edit_file", {"path": "notes/plan.md", "oldText": "one", "newText": "two"}),
                    ("read_file", {"path": "../../etc/passwd"}),
                    ("read_file", {"path": "/etc/passwd"}),
                    ("read_file", {"path": "escape/passwd"}),
                    ("write_file", {"path": "../outside.txt", "content": "x"}),
                    ("list_files", {}),
                    ("bash", {"command": "cat /etc/passwd"}),
                ]
            ),
            "wrote the plan",
        ],
    )
    make_run(
        conn,
        run_id,
        models={"m1": model},
        workspace=root,
        api_base=llm.api_base,
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Write a plan")],
        tools={"m1": ["read_file", "write_file", "edit_file", "list_files"]},
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"

    first, second = llm.requests[f"m1-{run_id}"]
    assert tool_names(first)[:4] == ["read_file", "write_file", "edit_file", "list_files"]
    assert "bash" not in tool_names(first)
    write, edit, up, absolute, link, outside, listing, bash = tool_results(second)
    assert json.loads(write)["ok"] and json.loads(edit)["ok"]
    assert (root / "notes/plan.md").read_text() == "step two"
    for refused in (up, absolute, link, outside):
        assert refused.startswith("TOOL_ERROR: ") and "outside the workspace" in refused
    assert not (tmp_path / "outside.txt").exists()
    assert json.loads(listing)["entries"] == ["escape/", "notes/", "notes/plan.md"]
    assert bash.startswith("TOOL_ERROR: ") and "Unknown tool 'bash'" in bash


def test_bash_is_offered_when_enabled(
    conn: redis.Redis, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    model = llm.script(
        f"m1-{run_id}", [ToolCalls([("bash", {"command": "echo built > out.txt && ls"})]), "ran it"]
    )
    make_run(
        conn,
        run_id,
        models={"m1": model},
        workspace=tmp_path / "ws",
        api_base=llm.api_base,
        tools={"m1": ["bash"]},
        tasks=[TaskSpec(id="task_1", member_id="m1", task="Build")],
    )

    assert execute_task(conn, run_id, "task_1") == "task_1: completed"
    (result,) = tool_results(llm.requests[f"m1-{run_id}"][1])
    assert json.loads(result) == {
        "action": "bash",
        "ok": True,
        "exitCode": 0,
        "output": "out.txt\n",
    }
    assert (tmp_path / "ws" / "out.txt").read_text() == "built\n"


@pytest.fixture
def background_pids() -> Iterator[list[int]]:
    """Pids a test's bash command left running in the background; killed by pid at teardown."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_bash_does_not_see_the_worker_environment(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("REDIS_URL", "redis://secret-host:6379/0")
    output = workspace.bash("env")["output"]
    assert "sk-secret-value" not in output and "OPENAI_API_KEY" not in output
    assert "secret-host" not in output and "REDIS_URL" not in output
    home = output.split("\nHOME=", 1)[1].split("\n", 1)[0]
    assert not Path(home).is_relative_to(workspace.root.parent)
    assert "LANG=C.UTF-8\n" in output


def test_bash_output_is_capped_while_it_is_read(workspace: Workspace) -> None:
    tracemalloc.start()
    try:
        result = workspace.bash("head -c 50000000 /dev/zero | tr '\\0' x", limit_chars=1000)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["exitCode"] == 0
    assert result["output"] == "x" * 1000 + "\n[output truncated: 49999000 more characters]"
    assert peak_bytes < 5_000_000


def test_bash_returns_when_bash_exits_though_a_setsid_child_holds_the_output(
    workspace: Workspace, background_pids: list[int]
) -> None:
    result = workspace.bash("setsid sleep 300 & echo started $!")
    background_pids.append(int(str(result["output"]).split()[-1]))
    # bash returned while the child, holding the output pipe, still runs: it was not waited for.
    assert not exited(background_pids[-1])
    assert result["exitCode"] == 0 and str(result["output"]).startswith("started ")


def test_a_background_child_is_not_a_timeout(
    workspace: Workspace, background_pids: list[int]
) -> None:
    result = workspace.bash("sleep 300 & echo started $!", timeout_s=5)
    background_pids.append(int(str(result["output"]).split()[-1]))
    # No timeout raised, and the child still runs: bash's exit ended the call, not the child's.
    assert not exited(background_pids[-1])
    assert result["exitCode"] == 0 and str(result["output"]).startswith("started ")


def test_a_command_that_outlives_its_timeout_is_killed_and_reported(workspace: Workspace) -> None:
    started = time.monotonic()
    with pytest.raises(ToolFailed, match=r"timed out after 1s.*\nbefore the kill\n"):
        workspace.bash("echo before the kill; sleep 300", timeout_s=1)
    # Killed at the timeout, not waited for: a generous bound, far from the sleep's 300 s.
    assert time.monotonic() - started < 60


def test_bash_runs_under_resource_limits(workspace: Workspace) -> None:
    """CPU seconds (the timeout), address space, file size and processes are limited, hard
    (the command cannot raise them), and the environment is still the minimal one."""
    result = workspace.bash(
        "ulimit -t -v -f; ulimit -H -t -v -f; ulimit -u; ulimit -v 8388608 2>&1; echo $HOME",
        timeout_s=7.5,
    )
    cpu, address_kib, size_kib, *hard, processes, raise_refused, home = str(
        result["output"]
    ).splitlines()
    limits = [cpu, address_kib, size_kib]
    assert [line.split()[-1] for line in limits + hard] == [
        "8",
        str(BASH_ADDRESS_SPACE_BYTES // 1024),
        str(BASH_FILE_SIZE_BYTES // 1024),
    ] * 2
    assert 1 + BASH_MORE_PROCESSES <= int(processes.split()[-1]) < 10_000
    assert "cannot modify limit" in raise_refused
    assert home.startswith(tempfile.gettempdir()) and str(workspace.root) not in home


def test_bash_stops_a_memory_hog_and_a_huge_file(workspace: Workspace) -> None:
    hog = workspace.bash("python3 -c 'bytearray(6 << 30)'; python3 -c 'bytearray(1 << 30)'")
    assert str(hog["output"]).endswith("\nMemoryError\n")  # the first only
    huge = workspace.bash("truncate -s 2G huge.bin; echo $?")
    assert "File size limit exceeded" in str(huge["output"])
    assert str(huge["output"]).endswith("\n153\n")  # 128 + SIGXFSZ
    assert (workspace.root / "huge.bin").stat().st_size == 0


def test_bash_stops_a_fork_bomb_of_an_unprivileged_user(tmp_path: Path) -> None:
    """Forks past the process limit fail. The kernel does not apply the limit to root, so as
    root the test runs the tool's own limits line as `nobody` (the interpreter may live where
    nobody can read it); dash, which gives up on a failed fork at once (bash retries)."""
    bomb = "for i in $(seq 2000); do sleep 300 >/dev/null 2>&1 & done; echo all started"
    as_user: dict[str, object] = {}
    if os.geteuid() == 0:
        tmp_path.chmod(0o755)
        os.chown(tmp_path, NOBODY_UID, NOBODY_UID)
        as_user = {"user": NOBODY_UID, "group": NOBODY_UID, "extra_groups": []}
    process = subprocess.Popen(  # type: ignore[call-overload]
        ["bash", "-c", _limits_script(30), "teamctl-bash", f"dash -c '{bomb}'"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **as_user,
    )
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the sleeps it did start
    assert "Cannot fork" in output and "all started" not in output
    assert process.returncode == 2


def test_read_file_reads_only_a_bounded_prefix_of_a_huge_file(workspace: Workspace) -> None:
    with (workspace.root / "huge.bin").open("wb") as file:
        file.truncate(64 * 1024 * 1024)  # sparse: costs no disk
    tracemalloc.start()
    try:
        text = workspace.read("huge.bin", limit_chars=100)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.startswith("\0" * 100 + "\n[truncated: ")
    assert "67108864 bytes" in text
    assert peak_bytes < 5_000_000


def test_edit_file_refuses_files_above_its_size_cap(workspace: Workspace) -> None:
    with (workspace.root / "big.txt").open("wb") as file:
        file.truncate(3 * 1024 * 1024)
    with pytest.raises(ToolFailed, match="edit_file works on files up to"):
        workspace.edit("big.txt", "\0", "x")


def test_write_file_replaces_a_hard_link_and_leaves_the_outside_file_alone(
    workspace: Workspace,
) -> None:
    outside = workspace.root.parent / "outside.txt"
    outside.write_text("outside content")
    os.link(outside, workspace.root / "linked.txt")
    assert workspace.write("linked.txt", "new content") == 11
    assert outside.read_text() == "outside content"
    assert (workspace.root / "linked.txt").read_text() == "new content"


def test_read_and_edit_refuse_hard_linked_files(workspace: Workspace) -> None:
    outside = workspace.root.parent / "outside.txt"
    outside.write_text("outside secret")
    os.link(outside, workspace.root / "linked.txt")
    with pytest.raises(ToolFailed, match="hard-linked files are refused"):
        workspace.read("linked.txt")
    with pytest.raises(ToolFailed, match="hard-linked files are refused"):
        workspace.edit("linked.txt", "secret", "changed")
    assert outside.read_text() == "outside secret"


def test_write_file_keeps_the_mode_of_the_file_it_replaces_but_never_execute(
    workspace: Workspace,
) -> None:
    """An overwrite keeps read and write bits and drops execute, setuid, setgid and sticky: a
    member that may only write files cannot make one a program (an MCP server's script)."""
    script = workspace.root / "run.sh"
    for before, after in [(0o750, 0o640), (0o755, 0o644), (0o4755, 0o644), (0o600, 0o600)]:
        script.write_text("echo old\n")
        script.chmod(before)
        workspace.write("run.sh", "echo new\n")
        assert (oct(stat.S_IMODE(script.stat().st_mode)), script.read_text()) == (
            oct(after),
            "echo new\n",
        )
    script.chmod(0o755)
    workspace.edit("run.sh", "new", "edited")
    assert stat.S_IMODE(script.stat().st_mode) == 0o644 and script.read_text() == "echo edited\n"
    assert [p.name for p in workspace.root.iterdir() if p.name.startswith(".")] == []


def test_write_file_creates_files_0644_at_most(workspace: Workspace) -> None:
    previous = os.umask(0)
    try:
        workspace.write("new/tool.sh", "#!/bin/sh\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((workspace.root / "new" / "tool.sh").stat().st_mode) == 0o644


def test_reading_a_fifo_is_refused_without_blocking(workspace: Workspace) -> None:
    os.mkfifo(workspace.root / "pipe")
    with pytest.raises(ToolFailed, match="not a regular file"):
        workspace.read("pipe")


@pytest.mark.parametrize("path", ["bad\0name.txt", "loop", "loop/inner.txt"])
def test_invalid_paths_fail_without_naming_host_paths(workspace: Workspace, path: str) -> None:
    (workspace.root / "loop").symlink_to("loop")
    for operation in (workspace.read, lambda p: workspace.write(p, "x"), workspace.list):
        with pytest.raises(ToolFailed, match="^invalid path: ") as failure:
            operation(path)
        assert str(workspace.root.parent) not in str(failure.value)


def test_os_errors_fail_without_naming_host_paths(workspace: Workspace) -> None:
    long_name = "n" * 300  # longer than any file system allows
    for operation in (workspace.read, lambda p: workspace.write(p, "x"), workspace.list):
        with pytest.raises(ToolFailed, match="name too long") as failure:
            operation(long_name)
        assert str(workspace.root.parent) not in str(failure.value)


def test_write_file_tool_refuses_content_that_is_not_a_string(workspace: Workspace) -> None:
    toolbox = Toolbox()
    add_workspace_tools(toolbox, workspace, ["write_file"])
    for content in (None, 42, ["a"]):
        result = toolbox.call("write_file", json.dumps({"path": "x.txt", "content": content}))
        assert result.startswith("TOOL_ERROR: ") and "content must be a string" in result
    assert not (workspace.root / "x.txt").exists()


def test_list_files_stops_at_its_limit_with_the_top_level_first(workspace: Workspace) -> None:
    for index in range(20):
        workspace.write(f"a/{index:02d}.txt", "")
    assert workspace.list(".", limit_entries=6) == [
        "a/",
        "a/00.txt",
        "a/01.txt",
        "escape/",
        "inside.txt",
        "passwd-link",
        "[truncated at 6 entries]",
    ]
    # Exactly the limit: nothing was left out, so no truncation note.
    assert workspace.list("a", limit_entries=20)[-1] == "a/19.txt"


def test_list_files_resolves_the_root_once_not_per_entry(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(20):
        (workspace.root / f"{index}.txt").write_text("")
    calls: list[Path] = []
    real_resolve = Path.resolve
    monkeypatch.setattr(
        Path, "resolve", lambda self, *a, **k: calls.append(self) or real_resolve(self, *a, **k)
    )
    assert len(workspace.list(".")) == 23
    assert calls == [workspace.root, workspace.real_root]  # the root once, then the path "."


SWAPPED_ACCESSES = 2000  # enough for the old resolve-then-open code to escape in every run


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace that a swapped-in symlink points to."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("outside secret")
    (directory / "outside-only.txt").write_text("outside")
    return directory


def _move_into_place(source: Path, target: Path, strays: Path) -> None:
    """os.rename(source, target), first moving aside a directory a write made at `target`.

    A rename cannot put a symlink over a directory, so the swap leaves `target` missing for a
    moment, and write_file creates missing parent directories."""
    for _ in range(1000):
        try:
            os.rename(source, target)
            return
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise
            os.rename(target, strays / uuid.uuid4().hex)
    raise AssertionError(f"{target} kept being recreated")


@contextlib.contextmanager
def swapping(directory: Path, outside: Path) -> Iterator[list[int]]:
    """While the block runs, a thread keeps swapping `directory` with a symlink to `outside`.

    Yields a list holding the number of completed swaps."""
    link, parked = directory.with_name("link-to-outside"), directory.with_name("parked")
    strays = directory.with_name("strays")
    strays.mkdir()
    link.symlink_to(outside, target_is_directory=True)
    stop, swaps, errors = threading.Event(), [0], []

    def swap() -> None:
        try:
            while not stop.is_set():
                os.rename(directory, parked)
                _move_into_place(link, directory, strays)  # now a symlink to outside
                os.rename(directory, link)
                _move_into_place(parked, directory, strays)  # a directory again
                swaps[0] += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join()
    assert errors == []


def assert_outside_untouched(outside: Path, inode: int) -> None:
    """Nothing created, replaced or written in the outside directory."""
    assert sorted(p.name for p in outside.iterdir()) == ["outside-only.txt", "secret.txt"]
    assert (outside / "secret.txt").read_text() == "outside secret"
    assert (outside / "secret.txt").stat().st_ino == inode


def test_reads_and_writes_stay_inside_while_a_directory_is_swapped_for_a_symlink(
    workspace: Workspace, outside: Path
) -> None:
    directory = workspace.root / "d"
    directory.mkdir()
    (directory / "secret.txt").write_text("inside secret")
    inode = (outside / "secret.txt").stat().st_ino
    read: list[str] = []
    with swapping(directory, outside) as swaps:
        for _ in range(SWAPPED_ACCESSES):
            with contextlib.suppress(ToolFailed):
                read.append(workspace.read("d/secret.txt"))
            with contextlib.suppress(ToolFailed):
                workspace.write("d/secret.txt", "inside secret")
    assert swaps[0] > 0 and read
    assert "outside secret" not in read
    assert_outside_untouched(outside, inode)


def test_list_and_edit_stay_inside_while_a_directory_is_swapped_for_a_symlink(
    workspace: Workspace, outside: Path
) -> None:
    directory = workspace.root / "d"
    directory.mkdir()
    (directory / "secret.txt").write_text("inside secret")
    inode = (outside / "secret.txt").stat().st_ino
    listed: set[str] = set()
    with swapping(directory, outside) as swaps:
        for _ in range(SWAPPED_ACCESSES):
            with contextlib.suppress(ToolFailed):
                listed.update(workspace.list("d"))
            with contextlib.suppress(ToolFailed):
                workspace.edit("d/secret.txt", "secret", "secret")
    assert swaps[0] > 0 and "d/secret.txt" in listed
    assert "d/outside-only.txt" not in listed
    assert_outside_untouched(outside, inode)


GIT_REFUSAL = (
    "path {path!r} is in or names {name}, which the workspace file tools never "
    "write: git runs hooks and commands named in a repository's .git (its config, "
    "its hooks); reading it is allowed"
)
NPMRC_REFUSAL = (
    "path {path!r} is in or names {name}, which the workspace file tools never "
    "write: npm and npx read a project's .npmrc, and settings such as node-options "
    "run code; reading it is allowed"
)


@pytest.mark.parametrize(
    ("path", "name", "refusal"),
    [
        (".git/config", ".git", GIT_REFUSAL),
        (".GIT/config", ".GIT", GIT_REFUSAL),
        ("sub/.git", ".git", GIT_REFUSAL),  # a file: the gitdir-link form
        (".git/hooks/pre-commit", ".git", GIT_REFUSAL),
        ("gitdir/config", ".git", GIT_REFUSAL),
        (".npmrc", ".npmrc", NPMRC_REFUSAL),
        ("web/.NPMRC", ".NPMRC", NPMRC_REFUSAL),
    ],
)
def test_file_tools_never_write_git_s_directory_nor_npmrc(
    workspace: Workspace, path: str, name: str, refusal: str
) -> None:
    """Refused in any component, in any case, through a symlink too (`gitdir` -> .git), for
    write_file and edit_file; read_file and list_files still see them."""
    git_dir = workspace.root / ".git"
    (git_dir / "hooks").mkdir(parents=True)
    (git_dir / "config").write_text("[core]\n")
    (workspace.root / "gitdir").symlink_to(".git")
    for write in (
        lambda: workspace.write(path, "[core]\n\tfsmonitor = evil\n"),
        lambda: workspace.edit(path, "[core]", "[core]\n\tfsmonitor = evil"),
    ):
        with pytest.raises(ToolFailed) as refused:
            write()
        assert str(refused.value) == refusal.format(path=path, name=name)
    assert workspace.read(".git/config") == "[core]\n"
    assert ".git/config" in workspace.list(".")
    assert not (workspace.root / "sub").exists() and not (workspace.root / ".npmrc").exists()
    assert workspace.write("notes/.gitignore", "*.log\n") == 6  # names merely like it: fine


def test_bash_home_is_a_private_directory_outside_the_workspace_removed_after(
    workspace: Workspace,
) -> None:
    result = workspace.bash("echo $HOME; stat -c %a $HOME; touch $HOME/.gitconfig && echo ok")
    home, mode, ok = str(result["output"]).splitlines()
    assert not Path(home).is_relative_to(workspace.root.resolve())
    assert (mode, ok) == ("700", "ok")
    assert not Path(home).exists()


def git_repository_with(root: Path, config: str) -> None:
    """A repository in `root` with a changed file and `config` appended to .git/config."""
    run = {"cwd": root, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)
    (root / "notes.txt").write_text("one\n")
    subprocess.run(["git", "add", "notes.txt"], **run)
    subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "one"], **run
    )
    (root / "notes.txt").write_text("two\n")
    with (root / ".git" / "config").open("a") as file:
        file.write(config)


def test_git_in_bash_runs_no_command_from_a_repository_s_config(
    workspace: Workspace, tmp_path: Path
) -> None:
    """fsmonitor (`git status`), hooks, pager, editor, credential helper and askpass planted in
    .git/config run nothing: the environment's overrides outrank the repository's config. The
    payload would write `pwned-<key>` beside the workspace."""
    out = tmp_path
    hooks = workspace.root / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(f"#!/bin/sh\ntouch {out}/pwned-hook\n")
    (hooks / "pre-commit").chmod(0o755)
    git_repository_with(
        workspace.root,
        (
            f'[core]\n\tfsmonitor = "touch {out}/pwned-fsmonitor; false"\n'
            f'\thooksPath = {hooks}\n\tpager = "touch {out}/pwned-pager; cat"\n'
            f'\teditor = "touch {out}/pwned-editor; true"\n'
            f'\taskPass = "touch {out}/pwned-askpass"\n'
            f'[credential]\n\thelper = "!touch {out}/pwned-credential; true"\n'
            f'[pager]\n\tstatus = "touch {out}/pwned-pager-status; cat"\n'
        ),
    )

    result = workspace.bash(
        "git status --short; script -qec 'git status --short' /dev/null; "
        "git -c user.name=T -c user.email=t@x commit -qam two; "
        "git -c user.name=T -c user.email=t@x commit --allow-empty; "
        "printf 'protocol=https\\nhost=example.com\\n\\n' | git credential fill; "
        "echo done",
        timeout_s=30,
    )

    assert str(result["output"]).startswith(" M notes.txt\n"), result
    assert str(result["output"]).endswith("done\n"), result
    assert sorted(p.name for p in out.glob("pwned-*")) == []
    assert (
        subprocess.run(
            ["git", "log", "--format=%s"],
            cwd=workspace.root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        == "two\none\n"
    )


def test_files_at_the_root_do_not_make_the_workspace_a_bare_repository_for_git(
    workspace: Workspace, tmp_path: Path
) -> None:
    """HEAD, config, objects/ and refs/ written with write_file (no `.git` in sight) would make
    git take the workspace for a bare repository and run its config's fsmonitor."""
    workspace.write("HEAD", "ref: refs/heads/main\n")
    workspace.write("objects/info/keep", "")
    workspace.write("refs/heads/keep", "")
    workspace.write(
        "config",
        f'[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch {tmp_path}/pwned; false"\n',
    )

    result = workspace.bash("git status")

    assert result["exitCode"] == 128
    assert "cannot use bare repository" in str(result["output"])
    assert not (tmp_path / "pwned").exists()


def test_bash_runs_without_a_process_limit_where_proc_is_missing(tmp_path: Path) -> None:
    """No /proc (a container without it): the user's count is unknown, so the command runs
    with its other limits; with a /proc, the user's tasks are counted from its status files."""
    missing = tmp_path / "no-proc"
    assert _user_task_count(missing) is None
    script = _limits_script(5, missing)
    assert " -u " not in script and script.startswith("ulimit -t 5 -v ")
    ran = subprocess.run(
        ["bash", "-c", script, "teamctl-bash", "ulimit -t; echo ran"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.stdout == "5\nran\n"
    fake = tmp_path / "proc"
    for pid, uid, threads in (("1", os.getuid(), 3), ("2", os.getuid() + 1, 5), ("x", 0, 9)):
        (fake / pid).mkdir(parents=True)
        (fake / pid / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\nThreads:\t{threads}\n")
    assert _user_task_count(fake) == 3
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    wanted = 3 + BASH_MORE_PROCESSES
    allowed = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    assert f" -u {allowed} " in _limits_script(5, fake)
