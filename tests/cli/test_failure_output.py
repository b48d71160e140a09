"""What `teamctl run` and `teamctl status` tell a person when a run does not complete: a Python
tool that does not import, refused credentials, a failed task and the one it blocked, a task that
never ran, a spent budget, a plan waiting for approval. Real `teamctl` processes, the shared
workers, Redis and litellm against the scripted server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from teamctl.coordinator.advice import teamctl_prog
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore

from tests.support.cli import TEAMCTL
from tests.support.llm import Held, HttpError, ScriptedLLM
from tests.support.replies import member_answer, script_run, task_id_of
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until
from tests.support.workers import wait_for_idle_queue

TOOL = "mypkg.tools:search_docs"
TWO_TASKS = [
    {"id": "a", "memberId": "m1", "task": "A"},
    {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
]
IN_WORKERS = (
    "in the environment of the workers (workers make every model call and read it when they start)"
)
SUMMARY = r"\d+\.\ds, {tokens} tokens, unpriced"
AS_JSON = pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
"""The ending lines of `teamctl run`, and of `teamctl run --json` (the answer is in the JSON)."""


def teamctl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """One `teamctl` command in a process of its own, stdin closed (no approval prompt)."""
    return subprocess.run(
        [*TEAMCTL, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def run_args(
    llm: ScriptedLLM, redis_url: str, run_id: str, team: Path, as_json: bool = False
) -> list[str]:
    return [
        "run",
        "Ship it",
        "--team",
        str(team),
        "--api-base",
        llm.api_base,
        "--redis-url",
        redis_url,
        "--workers",
        "0",
        "--run-id",
        run_id,
        *(["--json"] if as_json else []),
    ]


def awaiting_approval(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    team_path: Path,
    models: dict[str, str],
    reaper: list[subprocess.Popen[bytes]],
    as_json: bool = False,
) -> subprocess.Popen[bytes]:
    """`teamctl run` of a team whose plan needs approval (in `reaper`, stopped after the test),
    once the plan awaits it (no terminal: it waits for `teamctl approve` or a cancel)."""
    team = team_file(team_path, models, options={"require_plan_approval": True})
    run = subprocess.Popen(
        [*TEAMCTL, *run_args(llm, redis_url, run_id, team, as_json)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    reaper.append(run)
    store = RunStore(redis.Redis.from_url(redis_url, decode_responses=True), RunKeys(run_id))
    wait_until(
        lambda: store.exists() and store.state().status == "awaiting_approval",
        90,
        message="the plan to await approval",
    )
    return run


def answer_out(done: subprocess.CompletedProcess[str], as_json: bool) -> str | None:
    """What stdout holds of the answer: the text printed, or the JSON's `output`."""
    return json.loads(done.stdout)["output"] if as_json else done.stdout


def spelled(command: str, redis_url: str) -> str:
    """A command as teamctl suggests it from a command given `--redis-url redis_url`."""
    return f"{teamctl_prog()} {command} --redis-url {redis_url}"


def where_imports(directory: Path) -> str:
    """How an import error names where it looked (python_tools.where_imports_come_from)."""
    path = os.environ.get("PYTHONPATH")
    return f"the working directory {directory}" + (f" and PYTHONPATH={path}" if path else "")


def tool_project(root: Path, models: dict[str, str], module: str = "mypkg") -> Path:
    """A project directory: `mypkg/tools.py` with one tool (unless `module` is another name)
    and team.toml, whose one member m1 uses `module.tools:search_docs`."""
    package = root / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tools.py").write_text(
        'def search_docs(query: str) -> str:\n    """Search the docs."""\n    return query\n'
    )
    (root / "team.toml").write_text(
        "\n".join(
            [
                f'model = "{models["member"]}"',
                f'planner = {{ model = "{models["planner"]}" }}',
                f'synthesizer = {{ model = "{models["synth"]}" }}',
                "[[members]]",
                'id = "m1"',
                f'tools = ["{module}.tools:search_docs"]',
            ]
        )
        + "\n"
    )
    return root / "team.toml"


def unused_models(llm: ScriptedLLM, run_id: str) -> dict[str, str]:
    """Planner, member and synthesizer models with no reply: any call to them is a mistake."""
    return {role: llm.script(f"{role}-{run_id}", []) for role in ("planner", "member", "synth")}


def test_a_tool_the_workers_cannot_import_fails_the_run_before_any_model_call(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """teamctl imports mypkg from its working directory, the shared workers (elsewhere) cannot."""
    models = unused_models(llm, run_id)
    project = tmp_path / "project"
    team = tool_project(project, models)

    done = teamctl(*run_args(llm, workers, run_id, team), cwd=project)

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    first, last = done.stderr.splitlines()
    assert first == f"teamctl: run {run_id} on {workers}"
    error = last.removeprefix("teamctl: ")
    # The worker is named host:pid (the pid of the job's process, which varies).
    worker, rest = error.removeprefix(
        "Python tools do not import where their tasks would run: "
    ).split(" ", 1)
    assert re.fullmatch(re.escape(socket.gethostname()) + r":\d+", worker), error
    # The shared workers run in pytest's working directory.
    assert rest == (
        f"(queue members): member m1: tool '{TOOL}': cannot import mypkg.tools (No module "
        f"named 'mypkg') from {where_imports(Path.cwd())}; install it, or start teamctl and the "
        "workers where it imports (their directory, PYTHONPATH)"
    ), error
    assert llm.requests[f"planner-{run_id}"] == []  # no model call was paid for
    state = RunStore(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id)).state()
    assert (state.status, state.error, state.plan) == ("failed", error, None)

    status = teamctl("status", run_id, "--redis-url", workers)

    assert status.returncode == 1, status.stderr
    header, objective, error_line = status.stdout.splitlines()
    assert re.fullmatch(rf"{run_id}: failed; rounds 0; \d+\.\ds; 0 tokens, unpriced", header)
    assert (objective, error_line) == ("objective: Ship it", f"error: {error}")


def test_a_tool_the_coordinator_cannot_import_is_refused_before_the_run_is_stored(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """A module that imports nowhere: one line, exit 2, and nothing is written to Redis."""
    models = unused_models(llm, run_id)
    project = tmp_path / "project"
    missing = f"nopkg_{uuid.uuid4().hex[:8]}"
    team = tool_project(project, models, module=missing)

    done = teamctl(*run_args(llm, workers, run_id, team), cwd=project)

    assert done.returncode == 2, done.stderr
    assert (done.stdout, done.stderr.splitlines()) == (
        "",
        [
            f"teamctl: member m1: tool '{missing}.tools:search_docs': cannot import "
            f"{missing}.tools (No module named '{missing}') from {where_imports(project)}; install "
            "it, or start teamctl and the workers where it imports (their directory, PYTHONPATH)"
        ],
    )
    runs = teamctl("runs", "--redis-url", workers, "--json")
    assert runs.returncode == 0, runs.stderr
    assert run_id not in [row["run_id"] for row in json.loads(runs.stdout)]
    assert not RunStore(redis.Redis.from_url(workers), RunKeys(run_id)).exists()
    assert llm.requests[f"planner-{run_id}"] == []


@AS_JSON
def test_refused_credentials_fail_the_task_in_one_line_and_no_answer_is_printed(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, as_json: bool
) -> None:
    """A 401 fails the task at once with a line naming the key; nothing completed: no answer."""
    models = script_run(
        llm,
        run_id,
        [{"id": "a", "memberId": "m1", "task": "A"}],
        member=[HttpError(401, "Incorrect API key provided")],
    )
    team = team_file(tmp_path / "t.toml", models)

    done = teamctl(*run_args(llm, workers, run_id, team, as_json))

    assert done.returncode == 1, done.stderr
    assert answer_out(done, as_json) == ("final answer" if as_json else "")
    assert llm.authorizations[f"member-{run_id}"] == ["Bearer teamctl-no-key"]  # no key set
    task_error = (
        f"model {models['member']}: missing credentials (the server answered 401: "
        f"Incorrect API key provided): set OPENAI_API_KEY {IN_WORKERS}"
    )
    start, summary, *why = done.stderr.splitlines()
    assert start == f"teamctl: run {run_id} on {workers}"
    # Planner and synthesizer: 18 tokens each; the refused call spent none.
    assert re.fullmatch(
        rf"teamctl: run {run_id} failed in 1 round, 1 task ran, " + SUMMARY.format(tokens=36),
        summary,
    ), summary
    assert why == [
        f"teamctl: task a (m1) failed after 1 attempt: {task_error}",
        no_answer(run_id, workers, as_json),
    ]

    status = teamctl("status", run_id, "--redis-url", workers)

    assert status.returncode == 1, status.stderr
    header, objective, table_head, row = status.stdout.splitlines()
    assert re.fullmatch(rf"{run_id}: failed; rounds 1; \d+\.\ds; 36 tokens, unpriced", header)
    assert objective == "objective: Ship it"
    cost = "0 tokens, unpriced"  # the refused call spent nothing, and no call was priced
    assert table_head == f"task  member  status  attempts  time  {'cost':{len(cost)}}  error"
    assert re.fullmatch(
        r"a     m1      failed  1         \d\.\ds  " + re.escape(f"{cost}  {task_error}"), row
    ), row


def no_answer(run_id: str, redis_url: str, as_json: bool) -> str:
    """The line that says stdout holds no answer, and where the synthesizer's text is."""
    where = (
        "the JSON's output is the synthesizer's text"
        if as_json
        else f"`{spelled(f'status {run_id} --json', redis_url)}` has the synthesizer's text"
    )
    return f"teamctl: no task completed, so there is no answer ({where})"


@AS_JSON
def test_a_failed_task_and_the_task_it_blocked_each_get_a_line_and_the_answer_is_partial(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, as_json: bool
) -> None:
    """A 400 (not retried) fails a, which blocks b; c completes, so the answer is partial."""

    def refuse_a(body: dict[str, Any]) -> str | HttpError:
        if task_id_of(body) == "a":
            return HttpError(400, "context window exceeded")
        return member_answer(body)

    plan = [*TWO_TASKS, {"id": "c", "memberId": "m3", "task": "C"}]
    models = script_run(llm, run_id, plan, member=refuse_a)

    done = teamctl(*run_args(llm, workers, run_id, team_file(tmp_path / "t.toml", models), as_json))

    assert done.returncode == 1, done.stderr
    assert answer_out(done, as_json) == ("final answer" if as_json else "final answer\n")
    start, summary, *why = done.stderr.splitlines()
    assert start == f"teamctl: run {run_id} on {workers}"
    assert re.fullmatch(
        rf"teamctl: run {run_id} failed in 1 round, 2 tasks ran, " + SUMMARY.format(tokens=54),
        summary,
    ), summary
    assert why == [
        f"teamctl: task a (m1) failed after 1 attempt: model {models['member']} failed: "
        "litellm.BadRequestError: OpenAIException - context window exceeded",
        "teamctl: task b (m2) blocked: dependency failed",
        "teamctl: the JSON's output is a partial answer: 1 of 3 tasks completed"
        if as_json
        else "teamctl: the answer above is partial: 1 of 3 tasks completed",
    ]
    assert len(llm.requests[f"member-{run_id}"]) == 2  # a once, c once: a 400 is not retried


@AS_JSON
def test_a_task_that_never_ran_is_not_counted_as_run(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, as_json: bool
) -> None:
    """A task for an unknown member fails at dispatch (fail_on_unknown_member): it never ran."""
    plan = [
        {"id": "a", "memberId": "Ghost", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan)

    done = teamctl(
        *run_args(llm, workers, run_id, team_file(tmp_path / "t.toml", models), as_json),
        "--fail-on-unknown-member",
    )

    assert done.returncode == 1, done.stderr
    assert answer_out(done, as_json) == ("final answer" if as_json else "")
    start, summary, *why = done.stderr.splitlines()
    assert start == f"teamctl: run {run_id} on {workers}"
    assert re.fullmatch(
        rf"teamctl: run {run_id} failed in 1 round, 0 tasks ran, " + SUMMARY.format(tokens=36),
        summary,
    ), summary
    assert why == [
        "teamctl: task a (Ghost) failed before it ran: unknown team member: Ghost",
        "teamctl: task b (m2) blocked: dependency failed",
        no_answer(run_id, workers, as_json),
    ]
    assert llm.requests[f"member-{run_id}"] == []


def test_a_run_paused_on_its_budget_says_how_to_resume_or_end_it(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:  # noqa: F811  (the fixture)
    """A spent token budget pauses the run after task a: `run` and `status` say so once, with
    commands that work pasted; cancelled then, what never ran is blocked."""
    plan = [{"id": t, "memberId": "m1", "task": t} for t in ("a", "b", "c")]
    models = script_run(llm, run_id, plan, synth=None)
    team = team_file(tmp_path / "t.toml", models)
    run = subprocess.Popen(
        [
            *TEAMCTL,
            *run_args(llm, workers, run_id, team),
            "--max-tokens",
            "30",
            "--no-parallel-dispatch",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    group_reaper.append(run)
    store = RunStore(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
    wait_until(
        lambda: store.exists() and store.state().status == "awaiting_budget",
        90,
        message="the run to pause on its budget",
    )
    # The planner's 18 tokens leave 12: a's first call, at its worst (the prompt and 4096
    # output tokens), is not covered and not made.
    spent = store.conn.hget(RunKeys(run_id).usage, "budget_exceeded") or ""
    assert re.fullmatch(
        r"budget exceeded: 18 tokens used, the next call may take \d+, "
        r"max_tokens is 30",
        spent,
    ), spent

    status = teamctl("status", run_id, "--redis-url", workers)

    assert status.returncode == 0, status.stderr
    header, _objective, paused, *tasks = status.stdout.splitlines()
    assert header.startswith(f"{run_id}: awaiting_budget; rounds 1; "), header
    resume = spelled(f"budget {run_id} --add-tokens 10000", workers)
    assert paused == (
        f"paused, its budget spent: `{resume}` resumes it, "
        f"`{spelled(f'cancel {run_id}', workers)}` ends it"
    )
    assert [t.split()[:3] for t in tasks[1:]] == [
        ["a", "m1", "ready"],
        ["b", "m1", "ready"],
        ["c", "m1", "ready"],
    ]
    cancel = teamctl("cancel", run_id, "--redis-url", workers)
    assert cancel.returncode == 0, cancel.stderr
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1 and out.decode() == "", err
    start, pause_line, summary, *why = err.decode().splitlines()
    assert start == f"teamctl: run {run_id} on {workers}"
    assert pause_line == (
        f"teamctl: run {run_id} paused ({spent}): "
        f"`{spelled(f'budget {run_id} --add-tokens 10000', workers)}` "
        f"resumes it, `{spelled(f'cancel {run_id}', workers)}` ends it"
    )
    assert re.fullmatch(
        rf"teamctl: run {run_id} cancelled in 1 round, 0 tasks ran, " + SUMMARY.format(tokens=18),
        summary,
    ), summary
    assert why == [
        "teamctl: task a (m1) blocked: cancelled",
        "teamctl: task b (m1) blocked: cancelled",
        "teamctl: task c (m1) blocked: cancelled",
        "teamctl: no answer: the run was cancelled before its synthesis, and no task completed",
    ]
    assert llm.requests[f"member-{run_id}"] == []


@AS_JSON
def test_a_completed_run_ends_with_its_summary_alone(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, as_json: bool
) -> None:
    models = script_run(llm, run_id, TWO_TASKS)

    done = teamctl(*run_args(llm, workers, run_id, team_file(tmp_path / "t.toml", models), as_json))

    assert done.returncode == 0, done.stderr
    assert answer_out(done, as_json) == ("final answer" if as_json else "final answer\n")
    start, summary = done.stderr.splitlines()
    assert start == f"teamctl: run {run_id} on {workers}"
    assert re.fullmatch(
        rf"teamctl: run {run_id} completed in 2 rounds, 2 tasks ran, " + SUMMARY.format(tokens=72),
        summary,
    ), summary


@AS_JSON
def test_a_cancelled_run_says_it_was_cancelled_and_that_there_is_no_answer(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    as_json: bool,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:  # noqa: F811  (the fixture)
    """Cancelled while its plan awaits approval: no task ran, nothing was synthesized."""
    models = script_run(llm, run_id, TWO_TASKS, synth=None)
    run = awaiting_approval(
        llm, workers, run_id, tmp_path / "t.toml", models, group_reaper, as_json
    )

    cancel = teamctl("cancel", run_id, "--redis-url", workers)

    assert cancel.returncode == 0, cancel.stderr
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    assert (json.loads(out)["output"] if as_json else out.decode()) == (None if as_json else "")
    _start, waits, summary, *why = err.decode().splitlines()
    assert waits.startswith("teamctl: plan awaits approval: "), err
    assert re.fullmatch(
        rf"teamctl: run {run_id} cancelled in 0 rounds, 0 tasks ran, " + SUMMARY.format(tokens=18),
        summary,
    ), summary
    assert why == [
        "teamctl: task a (m1) blocked: cancelled",
        "teamctl: task b (m2) blocked: cancelled",
        "teamctl: no answer: the run was cancelled before its synthesis, and no task completed",
    ]


@AS_JSON
def test_a_run_past_its_timeout_says_so_and_that_there_is_no_answer(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, as_json: bool
) -> None:
    """The member is still in its model call at the timeout: after the grace period its task
    fails with the run's reason, and the run ends without synthesis."""
    held = Held("too late")
    models = script_run(
        llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}], member=[held], synth=None
    )
    team = team_file(tmp_path / "t.toml", models, options={"heartbeat_ttl_s": 1.0})
    try:
        done = teamctl(*run_args(llm, workers, run_id, team, as_json), "--timeout-s", "5")
    finally:
        held.release.set()

    assert done.returncode == 1, done.stderr
    assert answer_out(done, as_json) == (None if as_json else "")
    _start, summary, *why = done.stderr.splitlines()
    assert re.fullmatch(
        rf"teamctl: run {run_id} failed in 1 round, 1 task ran, " + SUMMARY.format(tokens=18),
        summary,
    ), summary
    assert why == [
        "teamctl: task a (m1) failed after 1 attempt: run timed out after 5s",
        "teamctl: run error: run timed out after 5s",
        "teamctl: no answer: the run ended before its synthesis, and no task completed",
    ]
    wait_for_idle_queue(workers, "members")  # the member's late reply is done with


def test_a_plan_awaiting_approval_shows_its_plan_and_the_commands_that_decide_it(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:  # noqa: F811  (the fixture)
    """`status` shows the plan and commands that work pasted into this shell, on this Redis."""
    models = script_run(llm, run_id, TWO_TASKS)
    run = awaiting_approval(llm, workers, run_id, tmp_path / "t.toml", models, group_reaper)

    status = teamctl("status", run_id, "--redis-url", workers)

    assert status.returncode == 0, status.stderr
    header, *lines = status.stdout.splitlines()
    approve = spelled(f"approve {run_id}", workers)
    reject = spelled(f"reject {run_id} --reason TEXT", workers)
    assert re.fullmatch(
        rf"{run_id}: awaiting_approval; rounds 0; \d+\.\ds; 18 tokens, "
        "unpriced",
        header,
    ), header
    assert lines == [
        "objective: Ship it",
        "Plan (2 tasks):",
        "  a -> m1: A",
        "  b -> m2 after a: B",
        f"it waits for `{approve}` or `{reject}`",
        "task  member  status   attempts  time  cost  error",
        "a     m1      planned  0         -     -",
        "b     m2      planned  0         -     -",
    ]

    hint = re.findall(r"`([^`]*)`", lines[4])[0]  # pasted as printed, into bash
    approved = subprocess.run(
        ["bash", "-c", hint], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )

    assert (approved.returncode, approved.stdout, approved.stderr) == (
        0,
        f"plan of run {run_id} approved\n",
        "",
    )
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert out == b"final answer\n"
    start, waits, summary = err.decode().splitlines()
    assert (start, waits) == (
        f"teamctl: run {run_id} on {workers}",
        f"teamctl: plan awaits approval: `{approve}` or `{reject}` "
        f"(`{spelled(f'status {run_id}', workers)}` shows it)",
    )
    assert re.fullmatch(
        rf"teamctl: run {run_id} completed in 2 rounds, 2 tasks ran, " + SUMMARY.format(tokens=72),
        summary,
    ), summary
