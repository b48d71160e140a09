"""What a workspace kept in Redis costs Redis: every byte it keeps counts toward its caps (content,
paths, version records, a constant per path), a file count is capped too, and deleted paths'
records go after a bounded window, a bounded batch at a time, so the caps hold for what Redis
really holds, measured with MEMORY USAGE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from teamctl.shared.keys import KeySpace, RunKeys
from teamctl.shared.workspace.caps import PATH_RECORD_BYTES, FileCaps
from teamctl.shared.workspace.mirror import WorkspaceMirror
from teamctl.shared.workspace.redis_files import PRUNE_BATCH, SaveVerdict, WorkspaceFiles

from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.slowlog import script_shas, slow_scripts_ms, slowlog_at_the_rule, within_the_rule
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until

STRUCTURES_BYTES = 2048
"""What a workspace's four structures cost whatever they hold (their key names, headers and
hash tables: `files`, `file_versions`, `file_deletions`, `files_info`): Redis held at most
~1,130 bytes more than the workspace counted, with one 1,000-byte path and a 128-character run
id; from a few files on, the per-path constant's slack covers them. Everything else counts
toward workspace_max_bytes."""
KEEP_MS = 200
"""A deleted record's keep, shortened for the tests (DELETED_KEEP_MS is ten minutes)."""


def footprint(conn: redis.Redis, keys: KeySpace) -> int:
    """What Redis holds for the workspace: MEMORY USAGE (every element) of each of its keys."""
    names = [
        keys.files,
        keys.file_versions,
        keys.file_deletions,
        keys.files_info,
        *conn.scan_iter(match=f"{keys.base}:blob:*", count=1000),
    ]
    return sum(
        int(conn.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0") or 0) for name in names
    )


def counted(files: WorkspaceFiles) -> int:
    return int(files.conn.hget(files.keys.files_info, "bytes") or 0)


def cost(path: str, content: bytes = b"") -> int:
    return len(content) + 2 * len(path.encode()) + PATH_RECORD_BYTES


def long_path(i: int, length: int = 1000) -> str:
    return f"{i:04d}/" + "p" * (length - 5)


def test_path_names_and_records_count_toward_the_workspace_bytes(
    conn: redis.Redis, run_id: str
) -> None:
    one = cost(long_path(0))  # an empty file: its path twice and a record
    files = WorkspaceFiles(conn, RunKeys(run_id), FileCaps(workspace_max_bytes=2 * one + 10))
    assert files.save(long_path(0), 0, b"").verdict is SaveVerdict.SAVED
    assert files.save(long_path(1), 0, b"").verdict is SaveVerdict.SAVED
    assert counted(files) == 2 * one
    refused = files.save(long_path(2), 0, b"")  # empty, yet its path and record do not fit
    assert refused.verdict is SaveVerdict.WORKSPACE_FULL
    assert files.save(long_path(1), 1, b"x" * 10).verdict is SaveVerdict.SAVED  # fits exactly
    assert files.save(long_path(1), 2, b"x" * 11).verdict is SaveVerdict.WORKSPACE_FULL
    assert counted(files) == 2 * one + 10
    assert sorted(files.versions()) == [long_path(0), long_path(1)]
    assert footprint(conn, files.keys) <= counted(files) + STRUCTURES_BYTES


def test_a_new_file_past_the_file_count_is_refused(conn: redis.Redis, run_id: str) -> None:
    files = WorkspaceFiles(conn, RunKeys(run_id), FileCaps(workspace_max_files=3))
    for name in ("a", "b", "c"):
        assert files.save(name, 0, b"1").verdict is SaveVerdict.SAVED
    assert files.save("d", 0, b"").verdict is SaveVerdict.TOO_MANY_FILES
    assert files.save("a", 1, b"changed").verdict is SaveVerdict.SAVED  # not a new file
    assert files.save("b", 1, None).verdict is SaveVerdict.SAVED
    assert files.save("d", 0, b"").verdict is SaveVerdict.SAVED
    assert len(files.conn.keys(f"{files.keys.base}:blob:*")) == 3  # refused content went


def test_deleted_records_go_after_their_keep_and_no_version_is_used_twice(
    conn: redis.Redis, run_id: str
) -> None:
    files = WorkspaceFiles(conn, RunKeys(run_id), deleted_keep_ms=KEEP_MS)
    assert files.save("notes.md", 0, b"v1").verdict is SaveVerdict.SAVED
    assert files.save("notes.md", 1, None).version == 2
    assert files.versions() == {"notes.md": 2}  # kept: a writer that saw v1 is told of v2
    assert files.save("notes.md", 1, b"stale").version == 2  # refused, naming the delete
    past_keep(conn, files)
    assert files.save("other.md", 0, b"x").verdict is SaveVerdict.SAVED  # drops a batch
    assert files.versions() == {"other.md": 1}
    assert conn.zcard(files.keys.file_deletions) == 0
    assert counted(files) == cost("other.md", b"x")
    # The record is gone, yet the writer that saw v1 is still refused, and a new file there
    # starts past every dropped version: v1 never comes back to match it.
    assert files.save("notes.md", 1, b"stale").verdict is SaveVerdict.CONFLICT
    assert files.save("notes.md", 0, b"new").version == 3
    assert files.save("notes.md", 1, b"stale").verdict is SaveVerdict.CONFLICT
    assert files.contents(["notes.md"]) == {"notes.md": b"new"}


def test_a_save_that_needs_the_room_drops_deleted_records_at_once(
    conn: redis.Redis, run_id: str
) -> None:
    caps = FileCaps(workspace_max_bytes=2 * cost(long_path(0)))
    files = WorkspaceFiles(conn, RunKeys(run_id), caps)  # the default keep: ten minutes
    for i in (0, 1):
        assert files.save(long_path(i), 0, b"").verdict is SaveVerdict.SAVED
        assert files.save(long_path(i), 1, None).verdict is SaveVerdict.SAVED
    assert counted(files) == 2 * cost(long_path(0))  # the deleted records still count
    assert files.save(long_path(2), 0, b"").verdict is SaveVerdict.SAVED
    assert files.versions() == {long_path(2): 3}  # past the dropped versions (2)
    assert counted(files) == cost(long_path(2))


def test_deleting_everything_leaves_next_to_nothing_in_redis(
    conn: redis.Redis, run_id: str
) -> None:
    files = WorkspaceFiles(conn, RunKeys(run_id), FileCaps(workspace_max_bytes=64 << 20))
    paths = [long_path(i, 3000) for i in range(3 * PRUNE_BATCH)]
    for path in paths:
        assert files.save(path, 0, b"x" * 100).verdict is SaveVerdict.SAVED
    assert counted(files) == sum(cost(path, b"x" * 100) for path in paths)
    assert footprint(conn, files.keys) <= counted(files) + STRUCTURES_BYTES
    for path in paths:
        assert files.save(path, 1, None).verdict is SaveVerdict.SAVED
    assert footprint(conn, files.keys) <= counted(files) + STRUCTURES_BYTES
    with slowlog_at_the_rule(conn):
        dropped = files.drop_deleted(keep_ms=0)  # in batches of PRUNE_BATCH long paths each
        assert within_the_rule(slow_scripts_ms(conn, script_shas("file_prune")))
    assert dropped == len(paths)
    assert files.versions() == {} and counted(files) == 0
    assert footprint(conn, files.keys) < 200  # the info hash: rev, bytes and floor


def test_a_mirror_takes_a_file_whose_record_went_as_deleted_and_may_create_it_again(
    conn: redis.Redis, run_id: str
) -> None:
    keys = RunKeys(run_id)
    other = WorkspaceFiles(conn, keys, deleted_keep_ms=KEEP_MS)
    assert other.save("kept.md", 0, b"k").verdict is SaveVerdict.SAVED
    assert other.save("gone.md", 0, b"g").verdict is SaveVerdict.SAVED
    assert other.save("again.md", 0, b"a").verdict is SaveVerdict.SAVED
    mirror = WorkspaceMirror.open(WorkspaceFiles(conn, keys, deleted_keep_ms=KEEP_MS))
    try:
        assert other.save("again.md", 1, None).verdict is SaveVerdict.SAVED
        mirror.pull()  # it saw again.md deleted, at version 2
        assert other.save("gone.md", 1, None).verdict is SaveVerdict.SAVED
        past_keep(conn, other)
        other.drop_deleted(KEEP_MS)
        assert other.versions() == {"kept.md": 1}
        assert other.save("kept.md", 1, b"k2").verdict is SaveVerdict.SAVED  # a rev to pull
        mirror.pull()
        assert not (mirror.root / "gone.md").exists()
        (mirror.root / "again.md").write_text("mine")
        assert mirror.push() == []
        assert other.contents(["again.md", "gone.md"]) == {"again.md": b"mine"}
    finally:
        mirror.close()


def past_keep(conn: redis.Redis, files: WorkspaceFiles) -> None:
    """Wait until every deleted record of the workspace is past its keep, by Redis's clock."""
    newest = conn.zrange(files.keys.file_deletions, -1, -1, withscores=True)
    if not newest:
        return
    due_ms = newest[0][1] + files.deleted_keep_ms

    def now_ms() -> int:
        seconds, micros = conn.time()
        return int(seconds) * 1000 + int(micros) // 1000

    wait_until(lambda: now_ms() > due_ms, message="the deleted records' keep to pass")


BASH_LOOP = (
    "d=$(printf 'd%.0s' $(seq 200)); x=$(printf 'x%.0s' $(seq 196)); mkdir -p $d/$d/$d && "
    "for i in $(seq 300); do touch \"$d/$d/$d/f$(printf '%03d' $i)$x\"; done; echo made"
)
"""300 empty files whose paths are 803 bytes long (three 200-character directories)."""
PATH_BYTES = 3 * 201 + 200


def test_a_bash_loop_of_files_leaves_redis_within_the_caps(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "redis")
    max_bytes = 20 * (2 * PATH_BYTES + PATH_RECORD_BYTES) + 1000  # room for 20 of them
    models = {
        "planner": llm.script(
            f"plan-{run_id}", [json.dumps([{"id": "a", "memberId": "maker", "task": "make files"}])]
        ),
        "maker": llm.script(
            f"maker-{run_id}",
            [
                ToolCalls([("bash", {"command": BASH_LOOP})]),
                ToolCalls([("bash", {"command": "rm -rf d*; echo gone"})]),
                "done",
            ],
        ),
        "synth": llm.script(f"synth-{run_id}", ["the answer"]),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        options={"workspace_max_bytes": max_bytes, "workspace_max_files": 1000},
        members=[{"id": "maker", "model": models["maker"], "tools": ["bash"]}],
    )

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    refusal = llm.requests[f"maker-{run_id}"][1]["messages"][-1]["content"]
    assert "WorkspaceNotSaved" in refusal and "option workspace_max_bytes" in refusal
    assert "more file(s) were not saved" in refusal  # 280 refusals, counted past the first 20
    conn = redis.Redis.from_url(workers)
    keys = RunKeys(run_id)
    # 20 made, then deleted; the other 280 never reached Redis.
    assert int(conn.hget(keys.files_info, "rev") or 0) == 2 * 20
    assert footprint(conn, keys) <= max_bytes + STRUCTURES_BYTES
