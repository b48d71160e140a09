"""The job that imports a run's Python tools on a worker of their queue before the run plans, so
a tool that imports where the coordinator runs but not where its tasks will (another working
directory, PYTHONPATH or host) is reported before any model call is paid for."""

from __future__ import annotations

from teamctl.shared.agent.python_tools import load_member_tools
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.run_records import ToolImportReport


def check_member_tools(spec: RunSpec, queue: str, worker: str) -> ToolImportReport:
    """Import the Python tools of every member of `spec` whose tasks go to `queue`."""
    failures = []
    for member in spec.members:
        if member.queue != queue:
            continue
        try:
            load_member_tools(member.tools)
        except ConfigError as exc:
            failures.append(f"member {member.id}: {exc}")
    return ToolImportReport(worker=worker, failures=failures)
