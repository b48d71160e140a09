"""Before the first plan: the members' Python tools import on a worker of their queue, not only in
the coordinator. The coordinator imports them itself before the run is stored; a worker started
in another directory, with another PYTHONPATH or on another host may still fail to, and every
task there would then fail. One job per queue (`run_tool_check`) imports them on a worker and
RQ keeps its report; a failure ends the run before any model call, as a configuration error."""

from __future__ import annotations

from typing import cast

from rq.job import Job
from rq.results import Result
from teamctl.coordinator.runs.context import RunContext
from teamctl.coordinator.runs.worker_wait import WAKE_EVERY_S, WorkerWait
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.run_records import ToolImportReport
from teamctl.shared.team_file import Member
from teamctl.shared.text import one_line

FAILURE_CHARS = 400


def tool_queues(members: list[Member]) -> list[str]:
    """The queues of the members that have Python tools (`package.module:function` entries)."""
    from teamctl.shared.agent.tool_names import is_python_tool

    return sorted({m.queue for m in members if any(is_python_tool(t) for t in m.tools)})


class ToolsDoNotImport(ConfigError):
    """A member's Python tool imports in the coordinator but not on a worker of its queue."""


class WorkerToolCheck:
    """Asks a worker of each queue with Python tools to import them, and waits for the reports."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def failures(self, deadline: float) -> list[str]:
        """One line per tool a worker could not import (with the worker and its queue); none
        when every report came back clean, or none came before `deadline` (said on stderr)."""
        queues = tool_queues(self.ctx.run.spec.members)
        if not queues:
            return []
        jobs = {queue: self.ctx.dispatcher.enqueue_tool_check(queue) for queue in queues}
        reports = self._await(jobs, deadline)
        return [
            f"{report.worker} (queue {queue}): {one_line(failure, FAILURE_CHARS)}"
            for queue, report in reports.items()
            for failure in report.failures
        ]

    def _await(self, jobs: dict[str, str], deadline: float) -> dict[str, ToolImportReport]:
        """The reports of the jobs that answer before `deadline`, a cancel or their end."""
        reports: dict[str, ToolImportReport] = {}
        pending = dict(jobs)
        wait = WorkerWait(self.ctx, deadline)
        while pending:
            for queue, job_id in list(pending.items()):
                first = queue == next(iter(pending))  # block on one job, poll the others
                result = Result.fetch_latest(
                    Job(job_id, connection=self.ctx.dispatcher.rq_conn),
                    timeout=int(WAKE_EVERY_S) if first else 0,
                )
                if result is not None:
                    del pending[queue]
                    report = self._report(queue, result)
                    if report is not None:
                        reports[queue] = report
            if not pending:
                break
            wait.check_still_wanted("tool check")
            if wait.timed_out():
                self.ctx.reporter.note(
                    "no worker checked the Python tools of "
                    f"{'queue' if len(pending) == 1 else 'queues'} "
                    f"{', '.join(pending)} in time; their tasks import them"
                )
                break
            wait.hint_if_unserved(list(pending))
        return reports

    def _report(self, queue: str, result: Result) -> ToolImportReport | None:
        """The job's report; None (said on stderr) when the job itself failed."""
        if result.type == Result.Type.SUCCESSFUL:
            # rq types return_value as Optional[Any]: the job returns its report's JSON text.
            return ToolImportReport.model_validate_json(cast(str, result.return_value))
        reason = (result.exc_string or "no reason kept").strip().splitlines()[-1]
        self.ctx.reporter.note(
            f"the Python tool check on queue {queue} failed on its worker "
            f"({one_line(reason, FAILURE_CHARS)}); its tasks import them"
        )
        return None
