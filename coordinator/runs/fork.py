"""New runs made from an ended run's records: `teamctl replay` (every recorded step, no model call
and no tool run) and `teamctl fork` (a fork point and changes: what does not depend on the point
is reused, the rest is paid for again).

The new run is an ordinary run with a `lineage` and a reuse entry per task; its coordinator and
workers run it through the current code, taking replies and tool results from the records where
the entries say so (coordinator/runs/run.py, worker/runs/attempt.py)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from teamctl.shared.agent.replies import Usage
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import normalize_id
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.hosts import this_host
from teamctl.shared.process.private_files import private_dir
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.journal import JournalEntry, complete_steps, journal_entries
from teamctl.shared.runs.lineage import Lineage, TaskReuse
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.model_call_records import ModelCallRecords
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.run_refs import check_new_run_id, new_run_id
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.team_file import Member, TeamFile

PLAN_POINT = "plan"


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork leaves its source: the plan (everything again), or a task's step (the task
    replays the steps before it, then goes on live)."""

    task_id: str | None
    step: int = 1

    @classmethod
    def parse(cls, text: str) -> ForkPoint:
        """`plan`, `TASK` or `TASK:STEP` (STEP from 1); ConfigError saying the forms."""
        if text.strip() == PLAN_POINT:
            return cls(None)
        task, _, step = text.strip().partition(":")
        step_ok = not step or (step.isascii() and step.isdigit() and int(step) >= 1)
        if normalize_id(task) != task or not step_ok:
            raise ConfigError(
                f"--at {text!r} is not a fork point; give `plan`, a task id (`t2`) or a task "
                "and its step from 1 (`t2:3`)"
            )
        return cls(task, int(step) if step else 1)

    @property
    def text(self) -> str:
        """The point as `--at` takes it (the first step of a task without its `:1`)."""
        if self.task_id is None:
            return PLAN_POINT
        return self.task_id if self.step == 1 else f"{self.task_id}:{self.step}"


@dataclass(frozen=True)
class ForkChanges:
    """What a fork changes from its source (nothing given: the same run again, paid for)."""

    model: str | None = None
    """Every role's model, as `teamctl run --model`."""
    api_base: str | None = None
    member_models: dict[str, str] = field(default_factory=dict)
    member_prompts: dict[str, str] = field(default_factory=dict)
    """Member id -> its new description (the `Expertise:` its tasks are given)."""
    objective: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    team: TeamFile | None = None


@dataclass
class NewRun:
    """The run to create from a source, and what it reuses and pays for (`--dry-run` prints
    it)."""

    spec: RunSpec
    reuse: dict[str, TaskReuse]
    kept: list[str] = field(default_factory=list)
    """Tasks completed with their source's output."""
    replayed: dict[str, int] = field(default_factory=dict)
    """Tasks whose session replays this many source steps before it goes on live."""
    live: list[str] = field(default_factory=list)
    """Tasks run live from their first step."""
    reused_calls: int = 0
    """Model calls taken from the source (the planner's, members' steps, the synthesizer's)."""
    estimate: Usage = field(default_factory=Usage)
    """What the paid part cost in the source: an estimate of what the new run pays."""
    cut: dict[str, int] = field(default_factory=dict)
    """Tasks whose source journal was cut at journal_max_bytes, and the steps it kept."""
    plan_reused: bool = True


@dataclass
class Source:
    """What a replay or fork reads of its source run, once."""

    run: RunHandle
    tasks: dict[str, TaskState]
    journals: dict[str, list[JournalEntry]] = field(default_factory=dict)

    @classmethod
    def read(cls, run: RunHandle) -> Source:
        """The ended run's board; ConfigError while it is still going."""
        state = run.store.state()
        if not state.finished:
            raise ConfigError(
                f"run {run.run_id} has not ended yet; replay or fork it once it has "
                f"(`teamctl cancel {run.run_id} --wait` ends it now)"
            )
        return cls(run, {t.task_id: t for t in run.board.snapshot()})

    def journal(self, task_id: str) -> list[JournalEntry]:
        """A task's journal, read once."""
        if task_id not in self.journals:
            self.journals[task_id] = journal_entries(self.run.conn, self.run.keys, task_id)
        return self.journals[task_id]

    def steps(self, task_id: str) -> int:
        """The task's recorded steps that can be replayed: each with its tool results."""
        return complete_steps(self.journal(task_id))

    def handed_to(self, task: TaskState) -> str | None:
        """The member whose session the journal holds when it is not the task's planned one
        (the source handed the task off), else None."""
        entries = self.journal(task.task_id)
        planned = self.run.spec.member_for(task.member_id)
        if not entries or planned is None or entries[0].member_id == planned.id:
            return None
        return entries[0].member_id

    def member_of(self, task: TaskState) -> str | None:
        """The member the source's plan gave the task (an unknown one resolved as it ran)."""
        member = self.run.spec.member_for(task.member_id)
        return member.id if member else None

    def call_usage(self, call: str) -> Usage | None:
        """The usage of the planner's or synthesizer's recorded reply (None: none recorded)."""
        outcome = ModelCallRecords(self.run.conn, self.run.keys).view(call).outcome
        return outcome.reply.usage if outcome and outcome.reply else None


def replay_of(
    source: Source, run_id: str | None, workspace_root: Path, team: TeamFile | None = None
) -> NewRun:
    """A run rebuilt from every record of `source`: no model call, no tool run (with `team`:
    the recorded run checked against a changed team)."""
    lineage = Lineage(kind="replay", source_run=source.run.run_id)
    spec = _changed(
        _new_spec(source.run.spec, run_id, workspace_root, lineage), ForkChanges(team=team)
    )
    new = NewRun(spec, {})
    _check_members(spec, source, list(source.tasks.values()))
    for task_id, task in source.tasks.items():
        new.reuse[task_id] = _replayed(new, source, task)
        new.replayed[task_id] = new.reuse[task_id].steps
        new.reused_calls += new.reuse[task_id].steps
    new.reused_calls += sum(source.call_usage(c) is not None for c in ("planner", "synthesizer"))
    return new


def _replayed(new: NewRun, source: Source, task: TaskState) -> TaskReuse:
    """What a replay takes of one task: every step it can, and why its records end early when
    they do (a replay says so where it runs out of them)."""
    ran = task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED)
    error = (task.error or "failed") if task.status is TaskStatus.FAILED else None
    handed_to = source.handed_to(task)
    if not ran:
        return TaskReuse(
            strict=True, recorded_end=f"the recorded run never ran it (it ended {task.status})"
        )
    if handed_to is not None:
        return TaskReuse(
            strict=True,
            recorded_end=f"the recorded session is {handed_to}'s: the task was handed off",
        )
    steps = source.steps(task.task_id)
    if task.journal_cut:
        new.cut[task.task_id] = steps
        end = f"its journal was cut at journal_max_bytes after {steps} step(s)"
        return TaskReuse(steps=steps, strict=True, source_error=None, recorded_end=end)
    return TaskReuse(steps=steps, strict=True, source_error=error)


def fork_of(
    source: Source,
    point: ForkPoint,
    changes: ForkChanges,
    run_id: str | None,
    workspace_root: Path,
) -> NewRun:
    """A run that keeps what does not depend on `point` and pays for the rest, with `changes`."""
    lineage = Lineage(kind="fork", source_run=source.run.run_id, at=point.text)
    spec = _changed(_new_spec(source.run.spec, run_id, workspace_root, lineage), changes)
    new = NewRun(spec, {}, plan_reused=point.task_id is not None)
    synthesis = source.call_usage("synthesizer")
    new.estimate = new.estimate.plus(synthesis or Usage())
    if point.task_id is None:  # everything again, from the plan
        new.estimate = new.estimate.plus(source.call_usage("planner") or Usage())
        for task in source.tasks.values():
            new.estimate = new.estimate.plus(task.usage)
        return new
    _check_point(source, point)
    new.reused_calls += source.call_usage("planner") is not None
    affected = _dependents(source, point.task_id)
    for task_id, task in source.tasks.items():
        if task_id == point.task_id:
            _fork_task(new, source, task, point.step)
        elif task_id in affected or task.status is not TaskStatus.COMPLETED:
            new.live.append(task_id)
            new.estimate = new.estimate.plus(task.usage)
        else:
            # Its journal is copied too: the fork's records stay whole for its own forks.
            new.reuse[task_id] = TaskReuse(output=task.output or "", steps=source.steps(task_id))
            new.kept.append(task_id)
            new.reused_calls += source.steps(task_id)
    _check_members(spec, source, [source.tasks[t] for t in [*new.live, *new.replayed]])
    return new


def create(new: NewRun, source: RunHandle) -> None:
    """Store the new run, what its tasks reuse, and its place among the source's forks; a local
    workspace starts as a copy of the source's (a live step may read what was written).

    The reuse entries go first: a run whose spec names a lineage always has them (a replay with
    none would run live), and nothing of another run is written over (its id is checked free,
    the spec is stored only if still free, and the workspace copied once it is ours)."""
    spec = new.spec
    keys = RunKeys(spec.run_id)
    store = RunStore(source.conn, keys)
    if store.exists():
        raise ConfigError(f"run {spec.run_id} already exists; pass another --run-id")
    LineageRecords(source.conn, keys).save_reuse(new.reuse)
    store.create(spec)
    if spec.workspace_store == "local":
        private_dir(Path(spec.workspace_dir))
        _copy_workspace(source.spec, Path(spec.workspace_dir))
    LineageRecords(source.conn, source.keys).add_fork(spec.run_id)


def _fork_task(new: NewRun, source: Source, task: TaskState, step: int) -> None:
    """The task at the fork point: its steps before `step` replayed, the rest paid again."""
    recorded = source.steps(task.task_id)
    replayed = min(step - 1, recorded)
    if task.journal_cut and step - 1 > recorded:
        new.cut[task.task_id] = recorded
    new.reuse[task.task_id] = TaskReuse(steps=replayed)
    new.replayed[task.task_id] = replayed
    new.reused_calls += replayed
    share = 1.0 if not recorded else (recorded - replayed) / recorded
    new.estimate = new.estimate.plus(_scaled(task.usage, share))


def _check_point(source: Source, point: ForkPoint) -> None:
    """The fork point names a task of the source's plan, and a step it could replay up to."""
    assert point.task_id is not None
    task = source.tasks.get(point.task_id)
    if task is None:
        known = ", ".join(source.tasks) or "none"
        raise ConfigError(
            f"run {source.run.run_id} has no task {point.task_id!r} (its tasks: {known})"
        )
    recorded = source.steps(point.task_id)
    if point.step > recorded + 1 and not task.journal_cut:
        raise ConfigError(
            f"task {point.task_id} of run {source.run.run_id} recorded {recorded} step(s); "
            f"fork at {point.task_id}:1 to {point.task_id}:{recorded + 1}"
        )
    handed_to = source.handed_to(task)
    if handed_to is not None and point.step > 1:
        raise ConfigError(
            f"task {point.task_id} was handed off to {handed_to} in run {source.run.run_id}, "
            f"so its steps are not its planned member's; fork at {point.task_id} (its first step)"
        )


def _check_members(spec: RunSpec, source: Source, tasks: list[TaskState]) -> None:
    """Every task the new run runs has its member in the new team (a removed one cannot run it,
    and its task must not go to another member in its stead)."""
    missing = sorted(
        {m for t in tasks if (m := source.member_of(t)) is not None and spec.member(m) is None}
    )
    if missing:
        raise ConfigError(
            f"member(s) {', '.join(missing)} run tasks of this run but are not in the team "
            "given with --team; keep them in it"
        )


def _dependents(source: Source, task_id: str) -> set[str]:
    """Every task that depends on `task_id`, directly or through others."""
    children: dict[str, list[str]] = {}
    for task in source.tasks.values():
        for parent in task.depends_on:
            children.setdefault(parent, []).append(task.task_id)
    found: set[str] = set()
    todo = list(children.get(task_id, []))
    while todo:
        child = todo.pop()
        if child not in found:
            found.add(child)
            todo.extend(children.get(child, []))
    return found


def _new_spec(spec: RunSpec, run_id: str | None, workspace_root: Path, lineage: Lineage) -> RunSpec:
    """The source's spec under a new id, workspace and start time, saying where it came from."""
    new_id = check_new_run_id(run_id or new_run_id())
    local = spec.workspace_store == "local"
    return spec.model_copy(
        update={
            "run_id": new_id,
            "workspace_dir": str(workspace_root / new_id),
            "created_ms": now_ms(),
            "workspace_host": this_host() if local else None,
            "lineage": lineage,
        }
    )


def _changed(spec: RunSpec, changes: ForkChanges) -> RunSpec:
    """The spec with a fork's changes: team, objective, options, models, member prompts."""
    update: dict[str, Any] = {}
    if changes.team is not None:
        team = changes.team
        update |= {
            "team_id": team.team_id,
            "members": team.members,
            "options": team.options,
            "hooks": team.hooks,
            "limits": team.limits,
            "planner_queue": team.planner.queue,
            "synthesizer_queue": team.synthesizer_queue(),
        }
    if changes.objective is not None:
        if not changes.objective.strip():
            raise ConfigError("--objective is empty: pass what the team should do")
        update["objective"] = changes.objective
    spec = spec.model_copy(update=update)
    options = _with_options(spec.options, changes.options)
    members = _with_member_changes(spec, changes)
    models = spec.models
    if changes.api_base:
        models = models.model_copy(update={"api_base": changes.api_base})
    if changes.model:
        models = models.model_copy(
            update={
                "planner": changes.model,
                "synthesizer": changes.model,
                "member_default": changes.model,
                "member_override": changes.model,
            }
        )
    if changes.member_models:  # a member's own model now wins over a run-wide --model
        members = [
            m.model_copy(
                update={
                    "model": changes.member_models.get(m.id) or models.member_override or m.model
                }
            )
            for m in members
        ]
        models = models.model_copy(update={"member_override": None})
    return spec.model_copy(update={"options": options, "members": members, "models": models})


def _with_member_changes(spec: RunSpec, changes: ForkChanges) -> list[Member]:
    """The members with their new prompts; a change for a member the team lacks is refused."""
    for member_id in [*changes.member_models, *changes.member_prompts]:
        if spec.member(member_id) is None:
            known = ", ".join(m.id for m in spec.members)
            raise ConfigError(f"no member {member_id!r} in the forked team (its members: {known})")
    return [
        m.model_copy(update={"description": changes.member_prompts[m.id]})
        if m.id in changes.member_prompts
        else m
        for m in spec.members
    ]


def _with_options(options: RunOptions, given: dict[str, str]) -> RunOptions:
    """The options with each `--option KEY=VALUE` applied; a bad key or value says which."""
    for key in given:
        if key not in RunOptions.model_fields:
            raise ConfigError(
                f"--option {key}: no such option; `teamctl run --help` lists them "
                "(as --kebab-case flags: use the snake_case name here)"
            )
    try:
        return RunOptions.model_validate({**options.model_dump(), **given})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "options"
        raise ConfigError(f"--option {key}: {first['msg']}") from exc


def _copy_workspace(source: RunSpec, into: Path) -> None:
    """The source's local workspace, when it is on this host (another host's cannot be read)."""
    if source.workspace_store != "local" or source.workspace_host not in (None, this_host()):
        return
    where = Path(source.workspace_dir)
    if where.is_dir():
        shutil.copytree(where, into, dirs_exist_ok=True, symlinks=True)


def _scaled(usage: Usage, share: float) -> Usage:
    """A share of a usage: what the part of a task's session not replayed cost."""
    return Usage(
        prompt_tokens=round(usage.prompt_tokens * share),
        completion_tokens=round(usage.completion_tokens * share),
        cost_usd=usage.cost_usd * share,
    )
