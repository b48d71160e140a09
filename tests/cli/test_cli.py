"""CLI edges: team file and flag validation (exit 2), read-only verbs, export, cancel, approve."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import typing
from importlib.metadata import version
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.advice import for_this_shell
from teamctl.coordinator.cli import main
from teamctl.coordinator.cli.app import LAZY_COMMANDS
from teamctl.coordinator.cli.options import merge_options
from teamctl.coordinator.cli.run_view import status_lines
from teamctl.coordinator.runs.result import (
    STATUS_ALL_TASKS_MAX,
    STATUS_UNANSWERED_ROWS,
    build_result,
)
from teamctl.coordinator.runs.run import RunRequest, create_run
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.bus import MessageBus
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import check_member_id, check_run_id, check_task_id, is_safe_id
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.retention import expire_run
from teamctl.shared.runs.run_config import ModelChoice
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.team_file import load_team_file

from tests.support.cli import TEAMCTL, on_a_terminal
from tests.support.runs import coordinator_store, planned_run, roster_bus, two_task_run


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[members]]\nid = "m1"\ntools = ["shell"]\n', "members.0.tools"),
        ("[options]\nmax_attempts = 0\n", "options.max_attempts"),
        ("[options]\nparalel_dispatch = true\n", "options.paralel_dispatch: unknown field"),
        ('hooks = ["no_colon"]\n', "hooks"),
        ('team_id = "../up"\n', "team_id"),
        ("members = []\n", "members"),
        ('[[members]]\nid = "lead"\n', "members.0.id"),
        ("model = [\n", "not valid toml"),
    ],
)
def test_invalid_team_file_exits_2_naming_the_field(
    tmp_path: Path, redis_url: str, text: str, expected: str
) -> None:
    team = tmp_path / "team.toml"
    team.write_text(text)
    result = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--redis-url", redis_url, "--workers", "0"]
    )
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_invalid_yaml_team_file_exits_2_with_one_line_naming_where(
    tmp_path: Path, redis_url: str
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text("members:\n  - id: m1\nmodel: [\n")
    result = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--redis-url", redis_url, "--workers", "0"]
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"teamctl: team file {team} is not valid yaml: expected the "
        "node content, but found '<stream end>' at line 4, column 1"
    )
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_bad_flag_value_and_unloadable_hook_exit_2(tmp_path: Path, redis_url: str) -> None:
    bad_flag = CliRunner().invoke(
        main, ["run", "x", "--max-attempts", "0", "--workers", "0", "--redis-url", redis_url]
    )
    assert bad_flag.exit_code == 2
    assert bad_flag.stderr.startswith("teamctl: --max-attempts: Input should be greater")
    team = tmp_path / "team.yaml"
    team.write_text("hooks: ['tests.no_such_module:Hook']\n")
    bad_hook = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--workers", "0", "--redis-url", redis_url]
    )
    assert bad_hook.exit_code == 2
    assert "hooks[0] 'tests.no_such_module:Hook': cannot load it" in bad_hook.stderr


def test_the_removed_dynamic_registration_option_is_named_in_a_team_file_not_in_a_stored_spec(
    tmp_path: Path, redis_url: str
) -> None:
    from teamctl.shared.runs.options import RunOptions

    team = tmp_path / "team.toml"
    team.write_text("[options]\nallow_dynamic_member_registration = true\n")
    refused = CliRunner().invoke(
        main, ["run", "x", "--team", str(team), "--workers", "0", "--redis-url", redis_url]
    )
    assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "options.allow_dynamic_member_registration: removed: a run's roster is fixed" in (
        refused.stderr
    )
    assert redis.Redis.from_url(redis_url).keys("*") == []
    # A run stored before the option was removed still loads.
    assert RunOptions.model_validate(
        {"allow_dynamic_member_registration": False, "max_rounds": 3}
    ) == RunOptions(max_rounds=3)


def test_default_team_and_flags_override_the_file(tmp_path: Path) -> None:
    default = load_team_file(None)
    assert [m.id for m in default.members] == ["researcher", "analyst", "writer"]
    assert default.options == RunOptions()
    team = tmp_path / "team.json"
    team.write_text(
        json.dumps(
            {
                "members": [{"id": "Solo Member"}],
                "options": {"max_rounds": 5, "dispatch": "barrier"},
            }
        )
    )
    loaded = load_team_file(team)
    assert loaded.members[0].id == "solo_member"
    merged = merge_options(
        loaded.options, {"max_rounds": 7, "parallel_dispatch": False, "dispatch": None}
    )
    assert (merged.max_rounds, merged.parallel_dispatch, merged.dispatch) == (7, False, "barrier")


def test_read_only_verbs_do_not_import_litellm(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    ended = f"{run_id}-ended"  # followers of a run that has ended print its history and return
    two_task_run(conn, ended, tmp_path)
    coordinator_store(conn, ended).finish(RunEnd("completed", 3600, output="done"))
    script = (
        "import sys\nfrom teamctl.coordinator.cli import main\n"
        f"for verb in (['status', '{run_id}', '--json'], ['tasks', '{run_id}', '--json'],\n"
        f"             ['runs', '--json'], ['messages', '{run_id}'],\n"
        f"             ['send', '{run_id}', '--to', 'researcher', 'hello'],\n"
        f"             ['tasks', '{ended}', '--follow', '--json'], ['events', '{ended}']):\n"
        f"    try:\n        main(verb + ['--redis-url', '{redis_url}'])\n"
        "    except SystemExit as exc:\n        assert not exc.code, (verb, exc.code)\n"
        "print('litellm loaded:', 'litellm' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("litellm loaded: False")
    assert f'"run_id": "{run_id}"' in done.stdout


def test_status_tasks_and_runs_read_the_run_from_redis(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    runner = CliRunner()
    status = runner.invoke(main, ["status", run_id, "--redis-url", redis_url, "--json"])
    assert status.exit_code == 0
    out = json.loads(status.stdout)
    assert (out["status"], [s["status"] for s in out["task_states"]]) == (
        "planning",
        ["ready", "pending"],
    )
    tasks = runner.invoke(main, ["tasks", run_id, "--redis-url", redis_url, "--json"])
    assert [t["task_id"] for t in json.loads(tasks.stdout)] == ["a", "b"]
    runs = runner.invoke(main, ["runs", "--redis-url", redis_url, "--json"])
    (row,) = json.loads(runs.stdout)
    started_ms = RunStore(conn, RunKeys(run_id)).state().started_ms
    assert 0 <= row.pop("duration_ms") <= now_ms() - started_ms
    assert row == {
        "run_id": run_id,
        "status": "planning",
        "rounds": 0,
        "objective": "Objective X",
        "started_ms": started_ms,
        "cost_usd": 0.0,
    }
    plain = runner.invoke(main, ["status", run_id, "--redis-url", redis_url])
    lines = plain.stdout.splitlines()
    assert re.fullmatch(rf"{run_id}: planning; rounds 0; \d+\.\ds; 0 tokens, unpriced", lines[0]), (
        lines
    )
    assert lines[1:] == [
        "objective: Objective X",
        "task  member  status   attempts  time  cost  error",
        "a     -       ready    0         -     -",
        "b     -       pending  0         -     -",
        for_this_shell(redis_url).spell(
            f"no coordinator is driving it: `teamctl resume {run_id}` continues it"
        ),
    ]
    missing = runner.invoke(main, ["status", "nope", "--redis-url", redis_url])
    assert missing.exit_code == 2 and "no run nope" in missing.stderr


def test_status_of_a_big_board_shows_its_counts_and_the_tasks_that_matter(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    size = STATUS_ALL_TASKS_MAX + 50
    board = planned_run(
        conn,
        run_id,
        tmp_path,
        [
            TaskSpec(id=f"t{i}", member_id="writer", task=f"T{i}", depends_on=[f"t{i - 1}"])
            if i in (1, 2)
            else TaskSpec(id=f"t{i}", member_id="writer", task=f"T{i}")
            for i in range(size)
        ],
    )
    for task_id, outcome in (("t0", "done"), ("t1", "broke"), ("t5", ""), ("t7", "")):
        token = board.claim(task_id, "researcher", "host:1", 60)
        assert token is not None
        if outcome == "done":
            assert board.complete(task_id, token, "T0 done", 1200) is WriteOutcome.APPLIED
        elif outcome:
            assert board.fail(task_id, token, outcome, 300) is WriteOutcome.APPLIED
    runner = CliRunner()
    plain = runner.invoke(main, ["status", run_id, "--redis-url", redis_url])
    assert plain.exit_code == 0, plain.output
    lines = plain.stdout.splitlines()
    spell = for_this_shell(redis_url).spell
    assert lines[1:] == [
        "objective: Objective X",
        f"tasks: {size - 5} ready, 2 in_progress, 1 completed, 1 failed, 1 blocked ({size} in all)",
        "task  member      status       attempts  time  cost                error",
        "t1    researcher  failed       1         0.3s  0 tokens, unpriced  broke",
        "t2    -           blocked      0         -     -                   dependency failed",
        "t5    researcher  in_progress  1         -     -",
        "t7    researcher  in_progress  1         -     -",
        spell(
            f"only the tasks in progress, failed or blocked are shown (4 of {size}); "
            f"`teamctl tasks {run_id}` lists every task"
        ),
        spell(f"no coordinator is driving it: `teamctl resume {run_id}` continues it"),
    ]
    # Each row is the one a whole table shows of its task.
    whole = status_lines(build_result(RunHandle.existing(conn, run_id), full=False))
    cells = {row[0]: row for line in whole if (row := re.split(r"\s{2,}", line))}
    assert [cells[row[0]] for row in map(re.compile(r"\s{2,}").split, lines[4:8])] == [
        re.split(r"\s{2,}", line) for line in lines[4:8]
    ]
    assert len([line for line in whole if re.match(r"t\d+ ", line)]) == size
    as_json = runner.invoke(main, ["status", run_id, "--redis-url", redis_url, "--json"])
    assert len(json.loads(as_json.stdout)["task_states"]) == size  # whole

    # Past the rows it shows, it says how many failed or blocked tasks it leaves out.
    assert board.block_stalled("cancelled") == size - 5
    lines = runner.invoke(main, ["status", run_id, "--redis-url", redis_url]).stdout.splitlines()
    shown = [line.split()[0] for line in lines if re.match(r"t\d+ ", line)]
    assert shown == ["t1", "t2", "t3", "t4", "t5", "t6", "t7"] + [
        f"t{i}" for i in range(8, 8 + STATUS_UNANSWERED_ROWS - 5)
    ]
    assert (
        lines[2]
        == f"tasks: 2 in_progress, 1 completed, 1 failed, {size - 4} blocked ({size} in all)"
    )
    assert lines[-2] == spell(
        f"only the tasks in progress and the first {STATUS_UNANSWERED_ROWS} of {size - 3} "
        f"failed or blocked are shown ({STATUS_UNANSWERED_ROWS + 2} of {size}); "
        f"`teamctl tasks {run_id}` lists every task"
    )


def test_tasks_reads_every_field_its_detail_shows(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    """`tasks` reads only the fields it shows: each part of the detail still comes through."""
    board = planned_run(
        conn,
        run_id,
        tmp_path,
        [TaskSpec(id=t, member_id="writer", task=t.upper()) for t in ("a", "b", "c")],
    )
    for task_id in ("a", "b"):
        assert board.claim(task_id, "researcher", "host:1", 60) is not None
    far_ms = now_ms() + 3_600_000
    conn.hset(
        board.keys.task("a"),
        mapping={"replayed_steps": 3, "model": "backup/m", "fallback_from": "main/m"},
    )
    conn.hset(board.keys.task("b"), mapping={"waiting_model": "main/m", "waiting_until_ms": far_ms})
    conn.hset(board.keys.task("c"), mapping={"error": "it\nbroke \x1b[31mred"})
    lines = CliRunner().invoke(main, ["tasks", run_id, "--redis-url", redis_url]).stdout
    rows = [line.split("\t") for line in lines.splitlines()]
    assert [row[:4] for row in rows] == [
        ["a", "in_progress", "researcher", "1"],
        ["b", "in_progress", "researcher", "1"],
        ["c", "ready", "-", "0"],
    ]
    assert rows[0][4] == "replayed 3 steps; model backup/m (fallback for main/m)"
    assert rows[1][4].startswith("waiting for main/m: ")
    assert rows[2][4] == "it broke red"


def test_export_writes_the_ai4j_file_layout(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    result = CliRunner().invoke(
        main, ["export", run_id, str(tmp_path / "out"), "--redis-url", redis_url]
    )
    assert result.exit_code == 0, result.output
    state = json.loads((tmp_path / "out" / "state" / "default.json").read_text())
    assert (state["teamId"], state["objective"], state["runActive"]) == (
        "default",
        "Objective X",
        True,
    )
    assert [m["id"] for m in state["members"]] == ["researcher", "analyst", "writer"]
    assert [(t["taskId"], t["status"], t["task"]["dependsOn"]) for t in state["taskStates"]] == [
        ("a", "READY", []),
        ("b", "PENDING", ["a"]),
    ]
    lines = (tmp_path / "out" / "mailbox" / "default.jsonl").read_text().splitlines()
    assert len(lines) == 1
    message = json.loads(lines[0])
    assert (message["fromMemberId"], message["toMemberId"], message["type"], message["taskId"]) == (
        "system",
        "researcher",
        "task.assigned",
        "a",
    )
    assert set(message) == {
        "id",
        "fromMemberId",
        "toMemberId",
        "type",
        "taskId",
        "content",
        "createdAt",
    }


def test_export_refuses_to_overwrite_files_unless_forced(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    out = tmp_path / "out"
    (out / "mailbox").mkdir(parents=True)
    (out / "mailbox" / "default.jsonl").write_text("mine\n")
    args = ["export", run_id, str(out), "--redis-url", redis_url]

    refused = CliRunner().invoke(main, args)

    assert (refused.exit_code, refused.stdout, refused.stderr) == (
        2,
        "",
        f"teamctl: {out}/mailbox/default.jsonl exists; pass --force to overwrite the "
        "export's files\n",
    )
    assert not (out / "state").exists()  # nothing written
    assert (out / "mailbox" / "default.jsonl").read_text() == "mine\n"
    forced = CliRunner().invoke(main, [*args, "--force"])
    assert (forced.exit_code, forced.stdout) == (
        0,
        f"{out}/state/default.json\n{out}/mailbox/default.jsonl\n",
    )
    assert json.loads((out / "mailbox" / "default.jsonl").read_text())["type"] == "task.assigned"


def test_cancel_without_a_live_coordinator_ends_the_run_here(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["cancel", run_id, "--redis-url", redis_url])
    assert result.exit_code == 0 and f"run {run_id} cancelled" in result.stdout
    state = RunStore(conn, RunKeys(run_id)).state()
    assert (state.status, state.error) == ("cancelled", "cancelled")
    board = TaskBoard(conn, RunKeys(run_id))
    assert {s.task_id: (s.status.value, s.error) for s in board.snapshot()} == {
        "a": ("blocked", "cancelled"),
        "b": ("blocked", "cancelled"),
    }
    again = runner.invoke(main, ["cancel", run_id, "--redis-url", redis_url])
    assert again.exit_code == 2 and "already finished (cancelled)" in again.stderr
    status = runner.invoke(main, ["status", run_id, "--redis-url", redis_url])
    assert status.exit_code == 1 and "cancelled" in status.stdout


def test_cancel_without_a_coordinator_revokes_a_dead_workers_claim(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    """The worker holding `a` died (its claim still looks alive); no coordinator is left."""
    two_task_run(conn, run_id, tmp_path)
    board = TaskBoard(conn, RunKeys(run_id))
    token = board.claim("a", "researcher", "gone-host:1", 600)
    assert token is not None

    result = CliRunner().invoke(main, ["cancel", run_id, "--redis-url", redis_url])

    assert result.exit_code == 0, result.output
    assert {s.task_id: (s.status.value, s.error) for s in board.snapshot()} == {
        "a": ("failed", "cancelled"),
        "b": ("blocked", "cancelled"),
    }
    late = board.complete("a", token, "late output", 5, announce_as="researcher")
    assert late is WriteOutcome.STALE
    a = board.get("a")
    assert (a.status, a.output, a.stale_writes, a.token) == (TaskStatus.FAILED, None, 1, "0")
    snapshot_counts: dict[TaskStatus, int] = {}
    for s in board.snapshot():
        snapshot_counts[s.status] = snapshot_counts.get(s.status, 0) + 1
    assert board.counts() == snapshot_counts
    assert conn.smembers(board.keys.running) == set()
    assert conn.zrange(board.keys.ready, 0, -1) == []
    types = [m.type for m in MessageBus(conn, RunKeys(run_id)).messages()]
    assert types.count("task.result") == 0 and types.count("run.cancelled") == 1


def test_a_stop_that_races_the_runs_end_leaves_no_key_without_a_ttl(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    """`cancel` checked the run was live, then its coordinator ended and expired it."""
    two_task_run(conn, run_id, tmp_path)
    store = coordinator_store(conn, run_id)
    store.finish(RunEnd("completed", 3600, output="done"))
    expire_run(conn, run_id, 3600)

    RunStore(conn, RunKeys(run_id)).request_stop("cancelled")
    RunStore(conn, RunKeys(run_id)).wake("approval")

    keys = RunKeys(run_id)
    assert all(0 < conn.ttl(k) <= 3600 for k in (keys.cancel, keys.approval, keys.events))


def test_approve_and_reject_need_a_run_that_asks_for_approval(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    two_task_run(conn, run_id + "-ask", tmp_path, require_plan_approval=True)
    runner = CliRunner()
    refused = runner.invoke(main, ["approve", run_id, "--redis-url", redis_url])
    assert refused.exit_code == 2 and "does not ask for plan approval" in refused.stderr
    too_early = runner.invoke(main, ["approve", run_id + "-ask", "--redis-url", redis_url])
    assert too_early.exit_code == 2 and "has no plan yet" in too_early.stderr
    coordinator_store(conn, run_id + "-ask").set_status("awaiting_approval")
    rejected = runner.invoke(
        main, ["reject", run_id + "-ask", "--reason", "too big", "--redis-url", redis_url]
    )
    assert rejected.exit_code == 0 and "rejected" in rejected.stdout
    twice = runner.invoke(main, ["approve", run_id + "-ask", "--redis-url", redis_url])
    assert twice.exit_code == 2 and "was already rejected" in twice.stderr
    state = RunStore(conn, RunKeys(run_id + "-ask")).state()
    assert (state.approval, state.approval_reason) == ("rejected", "too big")


def test_ai4j_limits_zero_or_less_mean_the_defaults() -> None:
    assert RunOptions(max_rounds=0).round_limit() == 64
    assert RunOptions(max_rounds=-3).round_limit() == 64
    assert RunOptions(max_rounds=2).round_limit() == 2
    assert RunOptions(max_concurrency=0).batch_size() == 1
    assert RunOptions(max_concurrency=3, parallel_dispatch=False).batch_size() == 1


def test_bad_redis_url_and_non_utf8_team_file_are_one_line_config_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_url = runner.invoke(main, ["status", "r1", "--redis-url", "foo://bar"])
    assert bad_url.exit_code == 2
    assert bad_url.stderr.startswith("teamctl: invalid Redis URL 'foo://bar'")
    team = tmp_path / "team.toml"
    team.write_bytes(b'team_id = "\xff\xfe"\n')
    bad_team = runner.invoke(main, ["run", "x", "--team", str(team), "--redis-url", "foo://bar"])
    assert bad_team.exit_code == 2
    assert "is not UTF-8 text" in bad_team.stderr and "Traceback" not in bad_team.output
    queue = tmp_path / "queue.toml"
    queue.write_text('[[members]]\nid = "m1"\nqueue = "--burst"\n')
    bad_queue = runner.invoke(main, ["run", "x", "--team", str(queue), "--redis-url", "foo://bar"])
    assert bad_queue.exit_code == 2 and "members.0.queue" in bad_queue.stderr


def test_model_flag_overrides_every_role_including_members_own_models() -> None:
    from teamctl.shared.runs.run_config import choose_models
    from teamctl.shared.settings import Settings
    from teamctl.shared.team_file import Member, TeamFile

    team = TeamFile(
        model="team-default", members=[Member(id="m1", model="member-own"), Member(id="m2")]
    )
    by_file, _ = choose_models(team, None, None, Settings())
    assert [by_file.for_member(m) for m in team.members] == ["member-own", "team-default"]
    by_flag, _ = choose_models(team, "flag-model", None, Settings())
    assert (by_flag.planner, by_flag.synthesizer) == ("flag-model", "flag-model")
    assert [by_flag.for_member(m) for m in team.members] == ["flag-model", "flag-model"]


def test_ids_with_a_trailing_newline_are_refused(tmp_path: Path, redis_url: str) -> None:
    for check in (check_run_id, check_member_id, check_task_id):
        with pytest.raises(ConfigError):
            check("x\n")
    assert not is_safe_id("x\n")
    for text, field in (
        ('team_id = "t\\n"\n', "team_id"),
        ('[[members]]\nid = "m1"\nqueue = "gpu\\n"\n', "members.0.queue"),
    ):
        team = tmp_path / "team.toml"
        team.write_text(text)
        with pytest.raises(ConfigError, match=field):
            load_team_file(team)
    bus = roster_bus(redis.Redis.from_url(redis_url, decode_responses=True), "r1", ["m1", "m2"])
    with pytest.raises(ConfigError, match="type"):
        bus.send("m1", "m2", "note\n", None, "hi")
    with pytest.raises(ConfigError, match="invalid run id"):
        MessageBus(redis.Redis.from_url(redis_url), RunKeys("r1\n"))
    result = CliRunner().invoke(
        main, ["run", "x", "--run-id", "r1\n", "--workers", "0", "--redis-url", redis_url]
    )
    assert result.exit_code == 2 and "invalid run id 'r1\\n'" in result.stderr
    # Nothing but the roster this test wrote for its bus.
    assert sorted(redis.Redis.from_url(redis_url, decode_responses=True).keys("*")) == sorted(
        [RunKeys("r1").roster, RunKeys("r1").roster_ver]
    )
    assert not (tmp_path / "state" / "workspaces").exists()


def _numeric_options() -> dict[str, type]:
    """Every int or float run option (Optional ones included) and its number type."""
    found = {}
    for name, info in RunOptions.model_fields.items():
        kinds = [
            a
            for a in (typing.get_args(info.annotation) or (info.annotation,))
            if a is not type(None)
        ]
        if kinds[0] in (int, float):
            found[name] = kinds[0]
    return found


@pytest.mark.parametrize("field", sorted(_numeric_options()))
def test_every_numeric_option_is_finite_and_bounded(
    field: str, redis_url: str, tmp_path: Path
) -> None:
    kind = _numeric_options()[field]
    flag = "--" + field.replace("_", "-")
    values = ["inf", "nan", "1e20", "-inf"] if kind is float else ["100000000000000000000"]
    for value in values:
        result = CliRunner().invoke(
            main, ["run", "x", flag, value, "--workers", "0", "--redis-url", redis_url]
        )
        assert result.exit_code == 2, (value, result.output)
        assert result.stderr.startswith(f"teamctl: {flag}: ")
        assert len(result.stderr.strip().splitlines()) == 1
    for value in (["inf", "nan"] if kind is float else []) + ["1000000000000000000"]:
        team = tmp_path / "team.toml"
        team.write_text(f"[options]\n{field} = {value}\n")
        with pytest.raises(ConfigError, match=rf"team file .*: options\.{field}: "):
            load_team_file(team)
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_option_ranges_are_in_the_help_and_defaults_lie_within_them() -> None:
    text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert "--timeout-s FLOAT" in text and "more than 0, at most 604800" in text
    assert "at most 31536000" in text  # retention: a year
    RunOptions.model_validate(RunOptions().model_dump())


def _corrupt_spec_timeout(conn: redis.Redis, run_id: str) -> None:
    """What an earlier teamctl stored for --model-timeout-s inf: JSON null."""
    spec = json.loads(conn.get(RunKeys(run_id).spec))
    spec["options"]["model_timeout_s"] = None
    conn.set(RunKeys(run_id).spec, json.dumps(spec))


CORRUPTIONS = {
    "spec null timeout": (_corrupt_spec_timeout, "options.model_timeout_s"),
    "spec not json": (lambda c, r: c.set(RunKeys(r).spec, "{not json"), "spec"),
    "state status": (lambda c, r: c.hset(RunKeys(r).state, "status", "exploded"), "exploded"),
    "state rounds": (lambda c, r: c.hset(RunKeys(r).state, "rounds", "many"), "many"),
    "state plan": (lambda c, r: c.hset(RunKeys(r).state, "plan", "[1"), "plan"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_one_unreadable_run_never_breaks_the_others(
    corruption: str, conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    corrupt, says = CORRUPTIONS[corruption]
    for run_id in ("good-1", "bad", "good-2"):
        two_task_run(conn, run_id, tmp_path)
    corrupt(conn, "bad")
    runner = CliRunner()

    runs = runner.invoke(main, ["runs", "--redis-url", redis_url])
    assert runs.exit_code == 0, runs.output
    rows = {line.split("\t")[0]: line for line in runs.stdout.splitlines()}  # piped: no header
    assert list(rows) == ["good-2", "bad", "good-1"]  # newest first
    assert rows["bad"].startswith("bad\t-\t-\tunreadable\t-\trun bad is unreadable: ")
    assert says in rows["bad"] and rows["bad"].count("\t") == 5
    assert re.fullmatch(
        r"good-1\t\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\t\d+\.\ds\tplanning\t"
        r"unpriced\tObjective X",
        rows["good-1"],
    ), rows["good-1"]
    as_json = json.loads(runner.invoke(main, ["runs", "--redis-url", redis_url, "--json"]).stdout)
    assert {r["run_id"]: r["status"] for r in as_json} == {
        "good-2": "planning",
        "bad": "unreadable",
        "good-1": "planning",
    }
    bad = next(r for r in as_json if r["run_id"] == "bad")
    assert says in bad.pop("error")
    assert bad == {
        "run_id": "bad",
        "status": "unreadable",
        "rounds": None,
        "objective": None,
        "started_ms": None,
        "duration_ms": None,
        "cost_usd": None,
    }
    # `tasks` reads the spec and the board, not the state hash: a bad state does not stop it.
    verbs = [["status", "bad"], ["status", "bad", "--json"]]
    verbs += [["tasks", "bad"]] if corruption.startswith("spec") else []
    for verb in verbs:
        result = runner.invoke(main, [*verb, "--redis-url", redis_url])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), verb
        assert result.stderr.startswith("teamctl: run bad is unreadable: ")
        assert says in result.stderr
        assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
    for verb in (["status", "good-1"], ["tasks", "good-2"]):
        assert runner.invoke(main, [*verb, "--redis-url", redis_url]).exit_code == 0


def test_an_unreadable_task_or_run_id_is_one_line_too(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    two_task_run(conn, "good", tmp_path)
    two_task_run(conn, "bad", tmp_path)
    conn.hset(RunKeys("bad").task("a"), "status", "weird")
    conn.zadd("teamctl:runs", {"bad\nid": 1})
    runner = CliRunner()
    for verb in (["status", "bad"], ["tasks", "bad", "--json"]):
        result = runner.invoke(main, [*verb, "--redis-url", redis_url])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), verb
        assert result.stderr.startswith("teamctl: run bad is unreadable: task 'a'")
        assert len(result.stderr.splitlines()) == 1
    runs = runner.invoke(main, ["runs", "--redis-url", redis_url])
    assert runs.exit_code == 0
    assert sorted(tuple(line.split("\t")[0:4:3]) for line in runs.stdout.splitlines()) == [
        ("'bad\\nid'", "unreadable"),
        ("bad", "planning"),
        ("good", "planning"),
    ]
    assert runs.stdout.splitlines()[-1] == (  # its score is the oldest
        "'bad\\nid'\t-\t-\tunreadable\t-\tinvalid run id 'bad\\nid' in the runs index"
    )


def test_bad_paths_are_one_line_config_errors_for_every_verb(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    """Tests run as root, so "unwritable" is a path under a regular file (ENOTDIR)."""
    two_task_run(conn, run_id, tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    state_is_a_file = tmp_path / "out-state-file"
    (state_is_a_file / "state").parent.mkdir()
    (state_is_a_file / "state").write_text("x")
    with_state_file = {**os.environ, "TEAMCTL_STATE_DIR": str(a_file)}
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (verb, with_state_file, "TEAMCTL_STATE_DIR")
        for verb in (
            ["run", "x", "--workers", "0"],
            ["status", "r1"],
            ["tasks", "r1"],
            ["messages", "r1"],
            ["runs"],
            ["approve", "r1"],
            ["reject", "r1"],
            ["resume", "r1"],
            ["cancel", "r1"],
            ["export", "r1", str(tmp_path / "out")],
            ["redis", "url"],
            ["redis", "cli", "ping"],
            ["redis", "stop"],
            ["run", "x", "--workers", "0", "--model", "m", "--redis-url", redis_url],
        )
    ]
    cases += [
        (["run", "x", "--team", str(tmp_path)], dict(os.environ), "team file"),
        (["run", "x", "--team", str(a_file / "team.toml")], dict(os.environ), "team file"),
        (["export", run_id, str(a_file), "--redis-url", redis_url], dict(os.environ), "DIRECTORY"),
        (
            ["export", run_id, str(a_file / "out"), "--redis-url", redis_url],
            dict(os.environ),
            "DIRECTORY",
        ),
        (
            ["export", run_id, str(state_is_a_file), "--redis-url", redis_url],
            dict(os.environ),
            "DIRECTORY",
        ),
    ]
    # Started together: each is a fresh interpreter, and they touch nothing shared.
    started = [
        (
            args,
            names,
            subprocess.Popen(
                [*TEAMCTL, *args],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            ),
        )
        for args, env, names in cases
    ]
    for args, names, process in started:
        stdout, stderr = process.communicate(timeout=60)
        done = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
        assert "Traceback" not in done.stdout + done.stderr, (args, done.stderr)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.splitlines()) == 1, (args, done.stderr)
        assert done.stderr.startswith("teamctl: ") and names in done.stderr, (args, done.stderr)
    assert conn.zrange("teamctl:runs", 0, -1) == [run_id]  # no run was created
    assert a_file.read_text() == "not a directory\n"
    assert not (tmp_path / "state" / "redis").exists()  # a config error starts no server


def _stored_run(
    conn: redis.Redis,
    run_id: str,
    objective: str,
    tmp_path: Path,
    started_ms: int,
    ended_ms: int,
    usage: dict[str, object],
) -> None:
    """A run of the default team created at `started_ms` that ended at `ended_ms`."""
    create_run(
        conn,
        RunRequest(
            objective=objective,
            team=load_team_file(None),
            models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
            workspace_root=tmp_path,
            run_id=run_id,
        ),
    )
    conn.zadd("teamctl:runs", {run_id: started_ms})
    conn.hset(
        RunKeys(run_id).state,
        mapping={
            "status": "completed",
            "started_ms": started_ms,
            "ended_ms": ended_ms,
            "rounds": 1,
        },
    )
    conn.hset(RunKeys(run_id).usage, mapping=usage)


def _local(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def test_runs_is_a_table_of_the_newest_runs_with_start_duration_status_and_cost(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    runner = CliRunner()
    empty = runner.invoke(main, ["runs", "--redis-url", redis_url])
    assert (empty.exit_code, empty.stdout) == (0, "no runs yet\n")  # stderr is no terminal
    start = 1_790_000_000_000
    _stored_run(conn, "oldest", "Short", tmp_path, start, start + 12_340, {"unpriced": 1})
    _stored_run(
        conn,
        "middle",
        "Plan\n\x1b[31ma\x1b[0m party " + "x" * 80,
        tmp_path,
        start + 1000,
        start + 1000 + 245_000,
        {"cost_usd": 0.0123, "unpriced": 1},
    )
    _stored_run(
        conn,
        "newest",
        "Write it up",
        tmp_path,
        start + 2000,
        start + 2000 + 7_380_000,
        {"cost_usd": 1.5},
    )

    code, table, _ = on_a_terminal([*TEAMCTL, "runs", "--redis-url", redis_url])
    piped = runner.invoke(main, ["runs", "--redis-url", redis_url])

    assert code == 0, table
    assert table.splitlines() == [
        "run     started              duration  status     cost      objective",
        f"newest  {_local(start + 2000)}  2h03m     completed  $1.5000   Write it up",
        f"middle  {_local(start + 1000)}  4m05s     completed  $0.0123+  Plan a party "
        + "x" * 47
        + "...",
        f"oldest  {_local(start)}  12.3s     completed  unpriced  Short",
    ]
    assert (piped.exit_code, piped.stdout.splitlines()) == (
        0,
        [  # for a script: no header
            f"newest\t{_local(start + 2000)}\t2h03m\tcompleted\t$1.5000\tWrite it up",
            f"middle\t{_local(start + 1000)}\t4m05s\tcompleted\t$0.0123+\tPlan a party "
            + "x" * 47
            + "...",
            f"oldest\t{_local(start)}\t12.3s\tcompleted\tunpriced\tShort",
        ],
    )
    newest = runner.invoke(main, ["runs", "--redis-url", redis_url, "--limit", "1", "--json"])
    assert json.loads(newest.stdout) == [
        {
            "run_id": "newest",
            "status": "completed",
            "rounds": 1,
            "objective": "Write it up",
            "started_ms": start + 2000,
            "duration_ms": 7_380_000,
            "cost_usd": 1.5,
        }
    ]
    for limit in ("0", "-3"):
        refused = runner.invoke(main, ["runs", "--redis-url", redis_url, "--limit", limit])
        assert (refused.exit_code, refused.stdout, refused.stderr) == (
            2,
            "",
            f"teamctl: --limit {limit}: give how many runs to list, 1 or more\n",
        )


def test_version_names_the_installed_package() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"teamctl {version('teamctl')}\n")


def test_the_help_lists_the_lazily_loaded_verbs_with_their_own_help() -> None:
    """`teamctl --help` lists run, team, teams and lead from a table without importing them:
    each entry must say what the verb's own help says first (all click shows there)."""
    for name, lazy in LAZY_COMMANDS.items():
        command = lazy.load()
        assert command.name == name
        assert lazy.help == " ".join((command.help or "").partition("\n\n")[0].split()), name
    listed = CliRunner().invoke(main, ["--help"], terminal_width=200).stdout
    assert re.search(
        r"^  run +Plan OBJECTIVE, run the team, print the synthesized answer\.$", listed, re.M
    )
    assert re.search(r"^  teams +List the persistent teams\.$", listed, re.M)


def test_help_imports_no_verb_and_reading_verbs_import_no_rq(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    """What makes the short verbs start fast: --help loads neither Redis nor pydantic, and
    reading a run loads neither RQ nor litellm; none loads the dashboard's server (Starlette,
    uvicorn), which only `teamctl dashboard` imports."""
    two_task_run(conn, run_id, tmp_path)
    loaded = (
        "print(*(m in sys.modules for m in ('redis', 'pydantic', 'rq', 'litellm', "
        "'starlette', 'uvicorn')))"
    )
    report = str(tmp_path / "report.html")
    for verb, expected in (
        (["--help"], "False False False False False False"),
        (["dashboard", "--help"], "False False False False False False"),
        (["status", run_id, "--redis-url", redis_url], "True True False False False False"),
        (
            ["report", run_id, "--html", report, "--redis-url", redis_url],
            "True True False False False False",
        ),
        (["runs", "--redis-url", redis_url], "True True False False False False"),
    ):
        script = (
            "import sys\nfrom teamctl.coordinator.cli import main\n"
            f"try:\n    main({verb!r})\nexcept SystemExit as exc:\n"
            f"    assert not exc.code, exc.code\n{loaded}\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout.splitlines()[-1]) == (0, expected), done.stderr
