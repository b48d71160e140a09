"""`teamctl diff RUN_A RUN_B`: two runs stored in Redis as their workers would leave them (tasks
claimed, charged and completed on the real board), compared as a person and a script read them;
no model runs."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.agent.replies import Usage
from teamctl.shared.keys import RUNS_INDEX
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunEnd
from teamctl.shared.task_records import TaskSpec

from tests.support.cli import TEAMCTL, assert_config_error
from tests.support.runs import coordinator_store, make_run

RUN_A = "ra"
RUN_B = "rb"
TTL_S = 60.0
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[31mred\x1b[0m\x9b1m"
"""An output that would set the clipboard, clear the screen and colour the terminal raw."""


@dataclass(frozen=True)
class Task:
    """A task as one run plans and ends it: its plan entry, its output, its usage."""

    spec: TaskSpec
    output: str
    tokens: tuple[int, int]
    cost_usd: float | None
    """None: no call of it had a known price."""


def store_run(
    conn: redis.Redis, run_id: str, tmp_path: Path, tasks: list[Task], objective: str
) -> RunHandle:
    """A run of members m1 and m2 whose tasks each were claimed, charged and completed."""
    make_run(
        conn,
        run_id,
        models={"m1": "mock/m", "m2": "mock/m"},
        tasks=[t.spec for t in tasks],
        workspace=tmp_path / run_id,
        api_base="http://127.0.0.1:9",
        objective=objective,
    )
    run = RunHandle.existing(conn, run_id)
    for task in tasks:
        token = run.board.claim(task.spec.id, task.spec.member_id or "m1", "host:1", TTL_S)
        assert token is not None, task.spec.id
        prompt, completion = task.tokens
        usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=task.cost_usd or 0.0,
            unpriced=task.cost_usd is None,
        )
        run.budget.charge(usage, task.spec.id)
        run.board.complete(task.spec.id, token, task.output, 10)
    return run


def task(task_id: str, member: str, text: str, output: str, tokens: int, cost_usd: float) -> Task:
    return Task(TaskSpec(id=task_id, member_id=member, task=text), output, (tokens, 0), cost_usd)


@pytest.fixture
def two_runs(conn: redis.Redis, tmp_path: Path) -> None:
    """Run A ended; run B, still running, keeps t1's output, changes t2's text and output,
    drops t3 and adds t4."""
    store_run(
        conn,
        RUN_A,
        tmp_path,
        [
            task("t1", "m1", "Gather facts", "facts\n", 100, 0.001),
            task("t2", "m2", "Write it up", "line one\nline two\nline three\n", 200, 0.002),
            task("t3", "m1", "Check sources", "checked", 50, 0.0005),
        ],
        "Compare queues",
    )
    coordinator_store(conn, RUN_A).finish(
        RunEnd(status=RunStatus.COMPLETED, retention_s=3600, output="answer")
    )
    store_run(
        conn,
        RUN_B,
        tmp_path,
        [
            task("t1", "m1", "Gather facts", "facts\n", 100, 0.001),
            task("t2", "m2", "Write it up briefly", "line one\nline 2\nline three\n", 150, 0.003),
            task("t4", "m1", "Add a summary", "summary", 30, 0.0002),
        ],
        "Compare queues briefly",
    )
    conn.zadd(RUNS_INDEX, {RUN_A: 1, RUN_B: 2})  # B is the last run, A the one before it


def teamctl(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TEAMCTL, *args, "--redis-url", redis_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


EXPECTED = [
    "run A: ra, completed; 350 tokens, $0.0035",
    "run B: rb, planning (in progress: compared as it stands); 280 tokens, $0.0042",
    "objective differs:",
    "  A: Compare queues",
    "  B: Compare queues briefly",
    "plan: 1 added, 1 removed, 1 changed, 1 the same",
    "  changed t2 task: 'Write it up' -> 'Write it up briefly'",
    "  removed t3: (m1) 'Check sources'",
    "  added t4: (m1) 'Add a summary'",
    "outputs:",
    "  t1: same",
    "  t2: differs",
    "    --- A",
    "    +++ B",
    "    @@ -1,3 +1,3 @@",
    "     line one",
    "    -line two",
    "    +line 2",
    "     line three",
    "usage:",
    "task   run A                run B                B - A",
    "t1     100 tokens, $0.0010  100 tokens, $0.0010  +0 tokens, +$0.0000",
    "t2     200 tokens, $0.0020  150 tokens, $0.0030  -50 tokens, +$0.0010",
    "t3     50 tokens, $0.0005   -                    -50 tokens, -$0.0005",
    "t4     -                    30 tokens, $0.0002   +30 tokens, +$0.0002",
    "total  350 tokens, $0.0035  280 tokens, $0.0042  -70 tokens, +$0.0007",
]


def test_diff_shows_plan_outputs_and_usage(two_runs: None, redis_url: str) -> None:
    shown = teamctl(redis_url, "diff", "last~1", "last")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == EXPECTED
    assert shown.stderr.splitlines() == [
        "teamctl: run ra (last~1, the run before the last)",
        "teamctl: run rb (the last run)",
    ]


def test_diff_json_holds_the_same_facts(two_runs: None, redis_url: str) -> None:
    shown = teamctl(redis_url, "diff", RUN_A, RUN_B, "--json")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert (out["a"]["run_id"], out["a"]["status"]) == (RUN_A, "completed")
    assert (out["b"]["run_id"], out["b"]["status"]) == (RUN_B, "planning")
    assert out["same_objective"] is False
    assert (out["added"], out["removed"], out["changed"]) == (["t4"], ["t3"], ["t2"])
    assert (out["tokens_delta"], round(out["cost_delta_usd"], 6)) == (-70, 0.0007)
    tasks = {t["task_id"]: t for t in out["tasks"]}
    assert list(tasks) == ["t1", "t2", "t3", "t4"]
    assert (tasks["t1"]["same_output"], tasks["t1"]["output_diff"]) == (True, [])
    assert tasks["t2"]["changed"] == ["task"]
    assert tasks["t2"]["same_output"] is False
    assert tasks["t2"]["output_diff"] == [
        "--- A",
        "+++ B",
        "@@ -1,3 +1,3 @@",
        " line one",
        "-line two",
        "+line 2",
        " line three",
    ]
    assert tasks["t2"]["tokens_delta"] == -50
    assert (tasks["t3"]["b"], tasks["t3"]["a"]["output"]) == (None, "checked")
    assert (tasks["t4"]["a"], tasks["t4"]["b"]["usage"]["prompt_tokens"]) == (None, 30)


def test_a_long_diff_is_cut_and_says_so(conn: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    before = "".join(f"a{i}\n" for i in range(30))
    after = "".join(f"b{i}\n" for i in range(30))
    store_run(conn, RUN_A, tmp_path, [task("t1", "m1", "T", before, 1, None)], "O")
    store_run(conn, RUN_B, tmp_path, [task("t1", "m1", "T", after, 1, None)], "O")
    shown = CliRunner().invoke(main, ["diff", RUN_A, RUN_B, "--redis-url", redis_url])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    start = lines.index("  t1: differs") + 1
    body = lines[start : lines.index("usage:")]
    assert body[:4] == ["    --- A", "    +++ B", "    @@ -1,30 +1,30 @@", "    -a0"]
    assert len(body) == 41  # 40 lines of the diff's 63, then the line that says so
    assert body[-1] == (
        "    (23 more lines of this diff not shown: `teamctl diff ra rb --json` has it whole)"
    )
    assert "plan: the same 1 task" in lines and "objective: the same" in lines
    assert "t1     1 token, unpriced  1 token, unpriced  +0 tokens, unpriced" in lines


def test_model_text_never_reaches_the_terminal_raw(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    store_run(conn, RUN_A, tmp_path, [task("t1", "m1", "T", "plain\n", 1, 0.0)], "O")
    store_run(
        conn,
        RUN_B,
        tmp_path,
        [task("t1", "m1", f"T {HOSTILE}", f"plain {HOSTILE}\n", 1, 0.0)],
        "O",
    )
    shown = teamctl(redis_url, "diff", RUN_A, RUN_B)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x9b" not in shown.stdout and "\x07" not in shown.stdout
    assert "  changed t1 task: 'T' -> 'T red 1m'" in shown.stdout.splitlines()
    assert "    +plain red 1m" in shown.stdout.splitlines()


def test_a_run_given_twice_or_unknown_is_a_usage_error(two_runs: None, redis_url: str) -> None:
    def diff(*args: str) -> Result:
        return CliRunner().invoke(main, ["diff", *args, "--redis-url", redis_url])

    assert_config_error(
        diff(RUN_B, "last"),
        "rb and last both name run rb: give two different runs (`",
    )
    assert_config_error(diff(RUN_A, "nope"), "no run nope; `")
    assert_config_error(diff("bad/id", RUN_B), "invalid run id 'bad/id'")
