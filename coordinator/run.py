"""One run from objective to result: plan, board, rounds, synthesis. The coordinator process."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import redis

from coordinator.dispatcher import Dispatcher
from coordinator.planner import make_plan
from coordinator.result import build_result, member_results
from coordinator.rounds import LoopState, RoundLoop
from coordinator.synthesizer import synthesize
from shared.board import TaskBoard
from shared.bus import MessageBus, shorten
from shared.errors import RunFailed
from shared.ids import check_run_id
from shared.llm import ModelClient
from shared.models import RunResult, TaskStatus
from shared.runstore import RunStore, now_ms
from shared.team import ModelChoice, RunSpec, TeamFile


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for, after the CLI has parsed and validated it."""

    objective: str
    team: TeamFile
    models: ModelChoice
    workspace_root: Path
    run_id: str | None = None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def create_run(conn: redis.Redis, request: RunRequest) -> RunSpec:
    """Store the run's spec in Redis; workers read everything they need from it."""
    run_id = check_run_id(request.run_id or new_run_id())
    workspace = request.workspace_root / run_id
    workspace.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(run_id=run_id, team_id=request.team.team_id, objective=request.objective,
                   members=request.team.members, options=request.team.options,
                   models=request.models, workspace_dir=str(workspace), created_ms=now_ms())
    RunStore(conn, run_id).create(spec)
    return spec


class Coordinator:
    """Drives one run; every step reads and writes Redis, so the run can be inspected live."""

    def __init__(self, conn: redis.Redis, rq_conn: redis.Redis, spec: RunSpec,
                 client: ModelClient) -> None:
        self.conn = conn
        self.spec = spec
        self.client = client
        self.store = RunStore(conn, spec.run_id)
        self.board = TaskBoard(conn, spec.run_id)
        self.bus = MessageBus(conn, spec.run_id, [m.id for m in spec.members],
                              enabled=spec.options.enable_message_bus,
                              max_message_bytes=spec.options.max_message_bytes)
        self.dispatcher = Dispatcher(rq_conn, spec)

    def run(self) -> RunResult:
        deadline = time.monotonic() + self.spec.options.timeout_s
        self._plan()
        self.store.set_status("running")
        loop = RoundLoop(self.conn, self.spec, self.board, self.bus, self.store,
                         self.dispatcher, deadline)
        state = loop.run(LoopState())
        self._synthesize(state)
        return build_result(self.conn, self.spec.run_id)

    def _plan(self) -> None:
        models = self.spec.models
        try:
            plan, reply = make_plan(self.client, models.planner, models.api_base,
                                    self.spec.objective, self.spec.members, self.spec.options)
        except Exception as exc:
            self.store.finish("failed", None, error=f"planner failed: {exc}")
            raise RunFailed(f"planner failed: {exc}") from exc
        self.store.add_usage(reply.usage)
        self.store.save_plan(plan)
        self.board.create(plan.tasks)

    def _synthesize(self, state: LoopState) -> None:
        states = self.board.snapshot()
        results = member_results(self.spec, states)
        not_run = [s for s in states if s.status == TaskStatus.BLOCKED]
        plan = self.store.state().plan
        assert plan is not None
        models = self.spec.models
        try:
            reply = synthesize(self.client, models.synthesizer, models.api_base,
                               self.spec.objective, plan, results, not_run)
        except Exception as exc:
            self.store.finish("failed", None, error=f"synthesizer failed: {exc}")
            raise RunFailed(f"synthesizer failed: {exc}") from exc
        self.store.add_usage(reply.usage)
        output = reply.content or ""
        self.bus.publish("system", "lead", "run.complete", None, shorten(output))
        self.store.finish(_final_status(state, states), output)


def _final_status(state: LoopState, states: list) -> str:
    if state.stop_reason == "cancelled":
        return "cancelled"
    if all(s.status == TaskStatus.COMPLETED for s in states):
        return "completed"
    return "failed"
