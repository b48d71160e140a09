"""Run hooks (AI4J's hook points): user classes named in the team file, called by the coordinator.

A hook is any class with some of the methods of `TeamHook`, named as "package.module:Class" and
built with no arguments. Hooks run in the coordinator process in registration order. A hook that
raises never stops the run: the error is published as a `hook.error` message and shown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from teamctl.shared.envelopes import Envelope, SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.user_code import import_user_module
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.output import MemberResult, SynthesisResult
from teamctl.shared.task_records import Plan, TaskState
from teamctl.shared.team_file import Member

log = logging.getLogger(__name__)

HOOK_ERROR_TYPE = SystemType.HOOK_ERROR
"""The notice a failing hook becomes (on_message skips it, so a failing on_message cannot feed
itself)."""


class TeamHook:
    """Every hook point, each a no-op; subclass and override what you need."""

    def before_plan(self, objective: str, members: list[Member], options: RunOptions) -> None:
        """Before the planner model is called."""

    def after_plan(self, objective: str, plan: Plan) -> None:
        """After the plan is normalized and on the board, before plan approval."""

    def before_task(self, objective: str, task: TaskState, member: Member | None) -> None:
        """When a worker has claimed a task (seen by the coordinator)."""

    def after_task(self, objective: str, result: MemberResult) -> None:
        """When a task completed or failed (including unknown-member failures)."""

    def on_message(self, message: Envelope) -> None:
        """For every message on the run's bus (hook.error messages excepted)."""

    def on_task_state_changed(
        self, objective: str, state: TaskState, member: Member | None, detail: str | None
    ) -> None:
        """For every change of a task's status on the board."""

    def after_synthesis(self, objective: str, result: SynthesisResult) -> None:
        """After the synthesizer answered, before `run.complete` is published: the final text
        (`result.output`) and the raw response (`result.response`)."""


def load_hooks(paths: list[str]) -> list[object]:
    """Import and build each hook; a bad path is a config error naming the entry."""
    hooks = []
    for index, path in enumerate(paths):
        module_name, _, attr = path.partition(":")
        try:
            cls = getattr(import_user_module(module_name.strip()), attr.strip())
            hooks.append(cls())
        except Exception as exc:  # import errors, missing attributes, constructor failures
            raise ConfigError(
                f"hooks[{index}] {path!r}: cannot load it ({exc}); write "
                "'package.module:ClassName' for a class importable here"
            ) from exc
    return hooks


Publish = Callable[[str, str], None]
"""publish(hook_point, error_text): how a hook failure reaches the bus."""


class HookRunner:
    """Calls every hook that defines a hook point; failures are reported, never raised."""

    def __init__(self, hooks: list[object], report: Publish | None = None) -> None:
        self.hooks = hooks
        self.report = report

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def call(self, point: str, *args: object) -> None:
        """Call `point` on every hook that has it, in registration order."""
        for hook in self.hooks:
            method = getattr(hook, point, None)
            if method is None:
                continue
            try:
                method(*args)
            except Exception as exc:  # a hook must never stop the run
                text = f"{type(hook).__name__}.{point} raised {type(exc).__name__}: {exc}"
                log.warning("%s", text)
                if self.report is not None:
                    self.report(point, text)
