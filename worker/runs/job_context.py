"""What every attempt of one task job shares: the run's parts, the model client, the claims."""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.tracing import NO_TRACING, Tracing
from teamctl.worker.runs.claims import Claims
from teamctl.worker.runs.heartbeat import Heartbeat


@dataclass
class JobContext:
    """Everything a job's sessions share: the run (its spec, board, bus, store, budget and keys
    on one connection), the model client, and this job's claims and their heartbeat."""

    run: RunHandle
    client: LitellmClient
    claims: Claims
    beat: Heartbeat
    worker: str
    tracing: Tracing = NO_TRACING
    traceparent: str | None = None
    """The span the attempts' spans go under: the round that dispatched the task, or the run."""
